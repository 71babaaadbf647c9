//! Progress on stderr for the commands that wait (`rigdeck pull`, `rigdeck bench`): a line
//! redrawn in place on a terminal; in a file or a pipe a plain line at each tenth of the way,
//! every few seconds between them, and at the end — never a carriage return or an escape code.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// In a file or pipe: the longest stretch without a line while the work goes on.
pub const PLAIN_LINE_EVERY: Duration = Duration::from_secs(5);

/// Where progress goes and what was written last.
pub struct ProgressLine<W: Write> {
    out: W,
    terminal: bool,
    /// Plain output: the tenth of the way reached by the last line, and when it was written.
    last_tenth: Option<u32>,
    last_at: Option<Instant>,
    last_text: String,
    /// Terminal output: a line is drawn and not yet ended.
    drawn: bool,
}

impl ProgressLine<std::io::Stderr> {
    /// Standard error, redrawn in place when it is a terminal.
    pub fn stderr() -> Self {
        let terminal = std::io::stderr().is_terminal();
        Self::new(std::io::stderr(), terminal)
    }
}

impl<W: Write> ProgressLine<W> {
    pub fn new(out: W, terminal: bool) -> Self {
        Self {
            out,
            terminal,
            last_tenth: None,
            last_at: None,
            last_text: String::new(),
            drawn: false,
        }
    }

    /// The work is `fraction` (0–1) done, described by `text`: redrawn on a terminal; in a
    /// file, written when a new tenth is reached or [`PLAIN_LINE_EVERY`] has passed.
    pub fn update(&mut self, fraction: f64, text: &str) {
        if self.terminal {
            let _ = write!(self.out, "\r\x1b[2K{text}");
            self.drawn = true;
            let _ = self.out.flush();
            return;
        }
        let tenth = (fraction.clamp(0.0, 1.0) * 10.0).floor() as u32;
        let new_tenth = self.last_tenth.is_none_or(|last| tenth > last);
        let quiet_too_long = self
            .last_at
            .is_some_and(|at| at.elapsed() >= PLAIN_LINE_EVERY);
        if (new_tenth || quiet_too_long) && text != self.last_text {
            self.plain(tenth, text);
        }
    }

    /// The last state, always shown, then the line ended (so what follows starts on its own).
    pub fn finish(&mut self, fraction: f64, text: &str) {
        if self.terminal {
            let _ = writeln!(self.out, "\r\x1b[2K{text}");
            self.drawn = false;
            let _ = self.out.flush();
        } else if text != self.last_text {
            let tenth = (fraction.clamp(0.0, 1.0) * 10.0).floor() as u32;
            self.plain(tenth, text);
        }
    }

    /// Ends a drawn line without a last state (before a message of its own).
    pub fn interrupt(&mut self) {
        if self.drawn {
            let _ = writeln!(self.out);
            self.drawn = false;
        }
    }

    fn plain(&mut self, tenth: u32, text: &str) {
        let _ = writeln!(self.out, "{text}");
        let _ = self.out.flush();
        self.last_tenth = Some(tenth);
        self.last_at = Some(Instant::now());
        text.clone_into(&mut self.last_text);
    }

    #[cfg(test)]
    fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(terminal: bool, steps: &[(f64, &str)], last: (f64, &str)) -> String {
        let mut line = ProgressLine::new(Vec::new(), terminal);
        for (fraction, text) in steps {
            line.update(*fraction, text);
        }
        line.finish(last.0, last.1);
        String::from_utf8(line.into_inner()).unwrap()
    }

    #[test]
    fn a_file_gets_a_plain_line_per_tenth_and_the_end() {
        let steps: Vec<(f64, String)> = (0..=200)
            .map(|i| (f64::from(i) / 200.0, format!("{i}/200")))
            .collect();
        let borrowed: Vec<(f64, &str)> = steps.iter().map(|(f, t)| (*f, t.as_str())).collect();
        let text = written(false, &borrowed, (1.0, "done 200/200"));
        assert!(!text.contains('\r') && !text.contains('\x1b'), "{text:?}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 12, "0 %, each tenth, the end: {lines:?}");
        assert_eq!(lines[1], "20/200");
        assert_eq!(lines.last(), Some(&"done 200/200"));
    }

    #[test]
    fn the_same_state_is_not_written_twice() {
        let text = written(false, &[(0.0, "0/3"), (1.0, "3/3")], (1.0, "3/3"));
        assert_eq!(text, "0/3\n3/3\n");
    }

    #[test]
    fn a_terminal_gets_the_line_redrawn_in_place_and_ended() {
        let text = written(true, &[(0.0, "a"), (0.5, "b")], (1.0, "c"));
        assert_eq!(text, "\r\x1b[2Ka\r\x1b[2Kb\r\x1b[2Kc\n");
    }
}
