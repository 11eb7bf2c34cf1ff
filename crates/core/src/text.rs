//! Text helpers every part of the core shares.

/// Cuts to at most `max` code points, marking the cut, never splitting a character.
pub fn truncate_chars(text: &str, max: usize) -> String {
    use std::fmt::Write;
    let mut out = FirstChars::new(max);
    // Refused past the cut, which `finish` marks.
    let _ = out.write_str(text);
    out.finish()
}

/// A writer that keeps the first `room` code points of what is written to it and refuses the
/// rest, so that the formatting feeding it stops early.
pub(crate) struct FirstChars {
    kept: String,
    room: usize,
    overflowed: bool,
}

impl FirstChars {
    pub(crate) fn new(room: usize) -> Self {
        FirstChars {
            kept: String::new(),
            room,
            overflowed: false,
        }
    }

    /// The text kept, with its last character replaced by `…` when more was written than fit.
    pub(crate) fn finish(mut self) -> String {
        if self.overflowed {
            self.kept.pop();
            self.kept.push('…');
        }
        self.kept
    }
}

impl std::fmt::Write for FirstChars {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        // One pass to find where the room ends, then one copy of what fits.
        let mut taken = 0;
        for (at, _) in text.char_indices() {
            if taken == self.room {
                self.kept.push_str(&text[..at]);
                self.room = 0;
                self.overflowed = true;
                return Err(std::fmt::Error);
            }
            taken += 1;
        }
        self.kept.push_str(text);
        self.room -= taken;
        Ok(())
    }
}
