//! Progress on anything longer than a few seconds, on a terminal or not:
//! on a terminal a bar (indicatif), elsewhere (nohup, SLURM, CI, a pipe) a
//! line every few seconds and at each new stage, so that a survey never
//! sits silent for ten minutes. The position never goes back (a retried
//! point does not undo the count), and the time left is learned from what
//! is done (nothing is promised before the first point ends).

use std::cell::{Cell, RefCell};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How often a plain line is written when stderr is not a terminal.
pub const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// What the position counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Points,
    Bytes,
}

enum Shown {
    Bar(indicatif::ProgressBar),
    Plain,
    Hidden,
}

/// A command's progress.
pub struct Bar {
    shown: Shown,
    unit: Unit,
    start: Instant,
    pos: Cell<u64>,
    len: Cell<u64>,
    msg: RefCell<String>,
    /// The stage of the message (its part before ':'), for a line at each new one.
    stage: RefCell<String>,
    last_line: Cell<Option<Instant>>,
}

impl Bar {
    /// A bar on a terminal, plain lines elsewhere (`hidden`: nothing, for a captured output).
    pub fn new(unit: Unit, hidden: bool) -> Bar {
        let shown = if hidden {
            Shown::Hidden
        } else if std::io::stderr().is_terminal() {
            let b = indicatif::ProgressBar::new(0);
            let template = match unit {
                Unit::Points => "{bar:30} {pos}/{len} points · {msg} · {elapsed} elapsed{prefix}",
                Unit::Bytes => "{bar:30} {bytes}/{total_bytes} · {bytes_per_sec} · {msg}{prefix}",
            };
            b.set_style(
                indicatif::ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            Shown::Bar(b)
        } else {
            Shown::Plain
        };
        Bar {
            shown,
            unit,
            start: Instant::now(),
            pos: Cell::new(0),
            len: Cell::new(0),
            msg: RefCell::new(String::new()),
            stage: RefCell::new(String::new()),
            last_line: Cell::new(None),
        }
    }

    /// The time left, learned from what is done: None before anything is.
    pub fn eta(&self) -> Option<Duration> {
        let (pos, len) = (self.pos.get(), self.len.get());
        if pos == 0 || len <= pos {
            return (len > 0 && len <= pos && pos > 0).then_some(Duration::ZERO);
        }
        let per = self.start.elapsed().as_secs_f64() / pos as f64;
        Some(Duration::from_secs_f64(per * (len - pos) as f64))
    }

    fn words(&self) -> String {
        let (pos, len) = (self.pos.get(), self.len.get());
        let done = match self.unit {
            Unit::Points => format!("{pos}/{len} points"),
            Unit::Bytes => {
                format!("{} of {}", gridperf_core::units::fmt_size(pos), gridperf_core::units::fmt_size(len))
            }
        };
        let eta = match self.eta() {
            Some(e) => format!(", ~{} left", fmt_secs(e)),
            None => String::new(),
        };
        format!("{done} · {} · {} elapsed{eta}", self.msg.borrow(), fmt_secs(self.start.elapsed()))
    }

    fn show(&self, new_stage: bool) {
        match &self.shown {
            Shown::Bar(b) => {
                b.set_length(self.len.get());
                b.set_position(self.pos.get());
                b.set_message(self.msg.borrow().clone());
                b.set_prefix(self.eta().map(|e| format!(", ~{} left", fmt_secs(e))).unwrap_or_default());
            }
            // a plain line waits for the first stage: "0/24 points ·  ·" says nothing
            Shown::Plain if self.msg.borrow().is_empty() => {}
            Shown::Plain => {
                let due = self.last_line.get().is_none_or(|t| t.elapsed() >= PLAIN_EVERY);
                if due || new_stage {
                    self.last_line.set(Some(Instant::now()));
                    eprintln!("gridperf: {}", self.words());
                }
            }
            Shown::Hidden => {}
        }
    }

    pub fn set_length(&self, len: u64) {
        self.len.set(len);
        self.show(false);
    }

    /// The position, never back.
    pub fn set_position(&self, pos: u64) {
        self.pos.set(self.pos.get().max(pos));
        self.show(false);
    }

    pub fn inc(&self, n: u64) {
        self.pos.set(self.pos.get().saturating_add(n));
        self.show(false);
    }

    /// What is measured now ("man: rtt tcp 1460 B"): a plain line at each new stage (the part
    /// before ':'); a message without one ("tcp 1460 B", a point) is a line every few seconds.
    pub fn set_message(&self, msg: impl Into<String>) {
        let msg = msg.into();
        let stage = msg.split_once(':').map(|(s, _)| s.to_string()).unwrap_or_default();
        let new_stage = *self.stage.borrow() != stage;
        *self.stage.borrow_mut() = stage;
        *self.msg.borrow_mut() = msg;
        self.show(new_stage);
    }

    /// A line above the bar (or plain).
    pub fn println(&self, line: impl AsRef<str>) {
        match &self.shown {
            Shown::Bar(b) => b.println(line),
            Shown::Plain => eprintln!("{}", line.as_ref()),
            Shown::Hidden => {}
        }
    }

    /// Whether nothing is drawn (a captured output).
    pub fn is_hidden(&self) -> bool {
        matches!(self.shown, Shown::Hidden)
    }

    /// Done: the bar goes; plain output, which has said something, says how long it took.
    pub fn finish_and_clear(&self) {
        match &self.shown {
            Shown::Bar(b) => b.finish_and_clear(),
            Shown::Plain if self.last_line.get().is_some() && self.start.elapsed() >= PLAIN_EVERY => {
                eprintln!("gridperf: done in {}", fmt_secs(self.start.elapsed()))
            }
            _ => {}
        }
    }
}

/// A duration in the largest units that read well: 45s, 3m20s, 1h05m.
pub fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_position_never_goes_back_and_the_time_left_waits_for_a_point() {
        let b = Bar::new(Unit::Points, true);
        b.set_length(4);
        assert_eq!(b.eta(), None, "nothing done: no time left promised");
        b.set_position(1);
        b.set_position(0);
        assert_eq!(b.pos.get(), 1, "a retried point does not undo the count");
        b.set_position(3);
        assert!(b.eta().is_some());
        b.set_position(4);
        assert_eq!(b.eta(), Some(Duration::ZERO));
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(fmt_secs(Duration::from_secs(45)), "45s");
        assert_eq!(fmt_secs(Duration::from_secs(200)), "3m20s");
        assert_eq!(fmt_secs(Duration::from_secs(3900)), "1h05m");
    }
}
