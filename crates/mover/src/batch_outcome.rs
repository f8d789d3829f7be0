//! What a delete batch tells the controller about each member, through the mover container's
//! termination message (the kubelet keeps at most 4 KiB of it in the Pod's status).
//!
//! A batch Job that completes released every member. One that fails (a member refused, a kopia
//! error) says here which members it released and which it refused; a member it does not name
//! keeps its finalizer and is batched again. So a message lost, cut or unreadable never
//! releases anything: the safe default is "not released".
//!
//! ```text
//! kopiur-delete-batch v1
//! refused <uid> <reason code>
//! released <uid>
//! ```
use std::collections::BTreeMap;

/// The first line; anything else is not a batch outcome.
pub const HEADER: &str = "kopiur-delete-batch v1";
/// The kubelet's cap on a termination message.
pub const MAX_BYTES: usize = 4096;

/// Why a member's kopia snapshot was kept. Each is a fact the mover read from the repository,
/// never a guess: the manifest the Snapshot names is not one this Snapshot made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// Not 32 hex digits: kopia would read it as a root object id, which can match many
    /// snapshots, or it is no id at all.
    NotAManifestId,
    /// The controller recorded no source identity for the Snapshot.
    NoRecordedIdentity,
    /// A manifest with that id exists but is not a snapshot of the recorded source (another
    /// source's snapshot, or a policy or other manifest).
    OtherSource,
    /// A snapshot of the recorded source, but its `kopiur-uid` tag names another Snapshot.
    UidTagMismatch,
}

impl Refusal {
    pub fn code(self) -> &'static str {
        match self {
            Refusal::NotAManifestId => "not-a-manifest-id",
            Refusal::NoRecordedIdentity => "no-recorded-identity",
            Refusal::OtherSource => "other-source",
            Refusal::UidTagMismatch => "uid-tag-mismatch",
        }
    }

    pub fn from_code(s: &str) -> Option<Refusal> {
        [Refusal::NotAManifestId, Refusal::NoRecordedIdentity, Refusal::OtherSource, Refusal::UidTagMismatch]
            .into_iter()
            .find(|r| r.code() == s)
    }

    /// For a condition message and an Event.
    pub fn explain(self) -> &'static str {
        match self {
            Refusal::NotAManifestId => {
                "the recorded id is not a kopia snapshot manifest id (32 hex digits); kopia would read it as a root \
                 object id, which can match other snapshots"
            }
            Refusal::NoRecordedIdentity => "the Snapshot has no source identity recorded by the controller",
            Refusal::OtherSource => {
                "the repository's manifest with that id is not a snapshot of this Snapshot's recorded source"
            }
            Refusal::UidTagMismatch => "the kopia snapshot's kopiur-uid tag does not name this Snapshot",
        }
    }
}

/// One member's outcome as the message carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberOutcome {
    /// Deleted by this batch, or already gone: the finalizer may go.
    Released,
    /// Kept: the manifest is not this Snapshot's.
    Refused(Refusal),
}

/// Renders the message: refused members first (they must stop being batched), then released
/// ones, cut at a whole line before `MAX_BYTES`. Members cut off are simply batched again.
pub fn render(outcomes: &[(String, MemberOutcome)]) -> String {
    let mut lines: Vec<String> = Vec::new();
    for (uid, o) in outcomes {
        if let MemberOutcome::Refused(r) = o {
            lines.push(format!("refused {uid} {}", r.code()));
        }
    }
    for (uid, o) in outcomes {
        if let MemberOutcome::Released = o {
            lines.push(format!("released {uid}"));
        }
    }
    let mut out = String::from(HEADER);
    for l in lines {
        if out.len() + 1 + l.len() > MAX_BYTES {
            break;
        }
        out.push('\n');
        out.push_str(&l);
    }
    out
}

/// Parses a message. `None` unless it starts with the header; a line that does not parse is
/// skipped (its member stays held), and only the listed `members` count, so a message can never
/// name a Snapshot its Job was not created for.
pub fn parse(message: &str, members: &[String]) -> Option<BTreeMap<String, MemberOutcome>> {
    let mut lines = message.lines();
    if lines.next()?.trim() != HEADER {
        return None;
    }
    let mut out = BTreeMap::new();
    for line in lines {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let (uid, outcome) = match parts.as_slice() {
            ["released", uid] => (*uid, MemberOutcome::Released),
            ["refused", uid, code] => match Refusal::from_code(code) {
                Some(r) => (*uid, MemberOutcome::Refused(r)),
                None => continue,
            },
            _ => continue,
        };
        if members.iter().any(|m| m == uid) {
            // A uid named twice keeps the safer answer: refused wins over released.
            match (out.get(uid), outcome) {
                (Some(MemberOutcome::Refused(_)), MemberOutcome::Released) => {}
                _ => {
                    out.insert(uid.to_string(), outcome);
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{i:08}-0000-0000-0000-000000000000")).collect()
    }

    #[test]
    fn a_message_round_trips_refusals_and_releases() {
        let m = members(3);
        let outcomes = vec![
            (m[0].clone(), MemberOutcome::Released),
            (m[1].clone(), MemberOutcome::Refused(Refusal::UidTagMismatch)),
            (m[2].clone(), MemberOutcome::Refused(Refusal::NotAManifestId)),
        ];
        let text = render(&outcomes);
        assert!(text.starts_with(HEADER));
        let back = parse(&text, &m).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[&m[0]], MemberOutcome::Released);
        assert_eq!(back[&m[1]], MemberOutcome::Refused(Refusal::UidTagMismatch));
        assert_eq!(back[&m[2]], MemberOutcome::Refused(Refusal::NotAManifestId));
    }

    #[test]
    fn a_long_message_is_cut_at_a_line_and_refusals_come_first() {
        let m = members(200);
        let mut outcomes: Vec<(String, MemberOutcome)> =
            m.iter().map(|u| (u.clone(), MemberOutcome::Released)).collect();
        outcomes[199].1 = MemberOutcome::Refused(Refusal::OtherSource);
        let text = render(&outcomes);
        assert!(text.len() <= MAX_BYTES, "{}", text.len());
        let back = parse(&text, &m).unwrap();
        assert_eq!(back[&m[199]], MemberOutcome::Refused(Refusal::OtherSource));
        assert!(back.len() < 200, "the cut drops some releases, which are batched again");
        assert!(back.len() > 50);
    }

    #[test]
    fn anything_but_a_batch_message_names_nobody() {
        let m = members(2);
        // A log tail (FallbackToLogsOnError), a truncated header, a forged uid, a bad code.
        assert_eq!(parse("error: connect failed\nreleased x", &m), None);
        assert_eq!(parse("kopiur-delete-batch v", &m), None);
        let forged = format!("{HEADER}\nreleased not-a-member\nrefused {} bogus-code\nreleased", m[0]);
        assert_eq!(parse(&forged, &m).unwrap(), BTreeMap::new());
    }

    #[test]
    fn a_uid_both_released_and_refused_stays_refused() {
        let m = members(1);
        for text in [
            format!("{HEADER}\nreleased {0}\nrefused {0} other-source", m[0]),
            format!("{HEADER}\nrefused {0} other-source\nreleased {0}", m[0]),
        ] {
            assert_eq!(parse(&text, &m).unwrap()[&m[0]], MemberOutcome::Refused(Refusal::OtherSource), "{text}");
        }
    }
}
