//! The algorithm names `kopia repository create` accepts for `--encryption`, `--block-hash`,
//! `--object-splitter` and `--ecc` (docs/design/api-contract.md §4.1, R rule "the name must be known to
//! kopia"). kopia matches them exactly (case-sensitive); these lists are kopia 0.23.1's, as its
//! own "enum value must be one of …" error prints them. The environment test
//! `repository_checks_e2e` compares them with the pinned kopia binary, so an upgrade that adds
//! or drops a name fails there.

/// One `repository create` option whose value is a kopia algorithm name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Encryption,
    BlockHash,
    ObjectSplitter,
    Ecc,
}

pub const ENCRYPTION: &[&str] = &["AES256-GCM-HMAC-SHA256", "CHACHA20-POLY1305-HMAC-SHA256"];

pub const BLOCK_HASH: &[&str] = &[
    "BLAKE2B-256",
    "BLAKE2B-256-128",
    "BLAKE2S-128",
    "BLAKE2S-256",
    "BLAKE3-256",
    "BLAKE3-256-128",
    "HMAC-SHA224",
    "HMAC-SHA256",
    "HMAC-SHA256-128",
    "HMAC-SHA3-224",
    "HMAC-SHA3-256",
];

pub const OBJECT_SPLITTER: &[&str] = &[
    "DYNAMIC",
    "DYNAMIC-128K-BUZHASH",
    "DYNAMIC-128K-RABINKARP",
    "DYNAMIC-1M-BUZHASH",
    "DYNAMIC-1M-RABINKARP",
    "DYNAMIC-256K-BUZHASH",
    "DYNAMIC-256K-RABINKARP",
    "DYNAMIC-2M-BUZHASH",
    "DYNAMIC-2M-RABINKARP",
    "DYNAMIC-4M-BUZHASH",
    "DYNAMIC-4M-RABINKARP",
    "DYNAMIC-512K-BUZHASH",
    "DYNAMIC-512K-RABINKARP",
    "DYNAMIC-8M-BUZHASH",
    "DYNAMIC-8M-RABINKARP",
    "FIXED",
    "FIXED-128K",
    "FIXED-1M",
    "FIXED-256K",
    "FIXED-2M",
    "FIXED-4M",
    "FIXED-512K",
    "FIXED-8M",
];

pub const ECC: &[&str] = &["REED-SOLOMON-CRC32"];

impl Algorithm {
    pub const ALL: [Algorithm; 4] = [Self::Encryption, Self::BlockHash, Self::ObjectSplitter, Self::Ecc];

    /// The `repository create` flag that carries it (without `=`).
    pub fn flag(self) -> &'static str {
        match self {
            Self::Encryption => "--encryption",
            Self::BlockHash => "--block-hash",
            Self::ObjectSplitter => "--object-splitter",
            Self::Ecc => "--ecc",
        }
    }

    /// What the name selects, for messages.
    pub fn what(self) -> &'static str {
        match self {
            Self::Encryption => "encryption algorithm",
            Self::BlockHash => "hash algorithm",
            Self::ObjectSplitter => "splitter",
            Self::Ecc => "error-correction algorithm",
        }
    }

    /// Every name kopia accepts, in kopia's order.
    pub fn known(self) -> &'static [&'static str] {
        match self {
            Self::Encryption => ENCRYPTION,
            Self::BlockHash => BLOCK_HASH,
            Self::ObjectSplitter => OBJECT_SPLITTER,
            Self::Ecc => ECC,
        }
    }

    /// Exact match, as kopia's own flag parser does.
    pub fn is_known(self, name: &str) -> bool {
        self.known().contains(&name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_exactly_and_only_for_their_own_flag() {
        assert!(Algorithm::Encryption.is_known("AES256-GCM-HMAC-SHA256"));
        assert!(!Algorithm::Encryption.is_known("aes256-gcm-hmac-sha256"), "kopia is case-sensitive");
        assert!(!Algorithm::Encryption.is_known(""));
        assert!(!Algorithm::Encryption.is_known("BLAKE3-256"), "a hash is no encryption");
        assert!(Algorithm::BlockHash.is_known("BLAKE3-256"));
        assert!(Algorithm::ObjectSplitter.is_known("DYNAMIC-4M-BUZHASH"));
        assert!(Algorithm::Ecc.is_known("REED-SOLOMON-CRC32"));
        assert!(!Algorithm::Ecc.is_known("REED-SOLOMON"));
        let flags: Vec<&str> = Algorithm::ALL.iter().map(|a| a.flag()).collect();
        assert_eq!(flags, ["--encryption", "--block-hash", "--object-splitter", "--ecc"]);
        for a in Algorithm::ALL {
            assert!(!a.known().is_empty());
            let mut sorted = a.known().to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), a.known().len(), "{a:?}: duplicate names");
        }
    }
}
