//! Streaming text: the text of the tokens so far is decoded again at each token (a byte-level
//! token may hold half a character) and shown as soon as it is final: whole characters only,
//! and never a tail that may be the start of a stop string. A stop string ends the text before
//! it.

/// The text of one generation and how much of it was shown.
#[derive(Debug, Default)]
pub struct TextStream {
    stops: Vec<String>,
    text: String,
    sent: usize,
}

impl TextStream {
    pub fn new(stops: &[String]) -> TextStream {
        TextStream {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            ..TextStream::default()
        }
    }

    /// Takes the decoded text of every token so far. Returns the stop string it contains, if
    /// any (the text is then cut before it).
    pub fn update(&mut self, text: String) -> Option<String> {
        self.text = text;
        let found = self
            .stops
            .iter()
            .filter_map(|s| self.text.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at)
            .map(|(at, s)| (at, s.clone()));
        let (at, s) = found?;
        self.text.truncate(at);
        Some(s)
    }

    /// How much of the text can be shown now.
    fn ready(&self) -> usize {
        let t = &self.text;
        let mut keep = t.len();
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if t.ends_with(&s[..i]) {
                    keep = keep.min(t.len() - i);
                }
            }
        }
        // An incomplete character decodes as U+FFFD until its last byte comes.
        while t[..keep].ends_with('\u{fffd}') {
            keep -= '\u{fffd}'.len_utf8();
        }
        keep
    }

    /// The new text that is final, if any (marked as shown).
    pub fn next_piece(&mut self) -> Option<&str> {
        let end = self.ready();
        self.piece(end)
    }

    /// Whatever was not shown yet, at the end of the generation.
    pub fn rest(&mut self) -> Option<&str> {
        self.piece(self.text.len())
    }

    fn piece(&mut self, end: usize) -> Option<&str> {
        let start = self.sent;
        // Text already shown never changes (only an unfinished tail does), but a decoder that
        // rewrote it must not make us slice inside a character.
        let piece = self.text.get(start..end).filter(|p| !p.is_empty())?;
        self.sent = end;
        Some(piece)
    }

    #[cfg(test)]
    fn text(&self) -> &str {
        &self.text
    }

    pub fn into_text(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(stops: &[&str]) -> TextStream {
        TextStream::new(&stops.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn stop_strings_end_the_text_and_their_starts_are_held_back() {
        let mut s = stream(&["\nUser:", "###"]);
        assert_eq!(s.update("hello\nUs".into()), None);
        assert_eq!(s.next_piece(), Some("hello"));
        assert_eq!(s.update("hello\nUsed".into()), None);
        assert_eq!(s.next_piece(), Some("\nUsed"));
        assert_eq!(s.update("hello\nUsed ### x".into()), Some("###".into()));
        assert_eq!(s.text(), "hello\nUsed ");
        assert_eq!(s.rest(), Some(" "));
        assert_eq!(s.rest(), None);
    }

    #[test]
    fn half_characters_wait_for_their_last_byte() {
        let mut s = stream(&[]);
        s.update("caf\u{fffd}".into());
        assert_eq!(s.next_piece(), Some("caf"));
        assert_eq!(s.next_piece(), None);
        s.update("café".into());
        assert_eq!(s.next_piece(), Some("é"));
        // Rewritten text: no slicing inside a character, no panic.
        s.update("ab".into());
        assert_eq!(s.next_piece(), None);
    }
}
