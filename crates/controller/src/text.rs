//! Text helpers shared by every kind (crate root).

/// `s` cut to at most `max` bytes on a character boundary (an Event note's 1 KiB cap).
pub fn truncate(s: &str, max: usize) -> String {
    let mut cut = max.min(s.len());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s[..cut].to_string()
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn cuts_on_a_character_boundary() {
        assert_eq!(truncate("short", 1024), "short");
        assert_eq!(truncate("abcdef", 3), "abc");
        // "é" is two bytes: a cut inside it backs off to the boundary before it.
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate("", 0), "");
    }
}
