//! `SchedulingPolicy` (`--scheduling-policy`): the order waiting requests are admitted in
//! and running ones preempted in.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedulingPolicy {
    Fcfs,
    /// Lowest `priority` value first, then arrival order; preempts the highest value first.
    Priority,
}

impl std::str::FromStr for SchedulingPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fcfs" => Ok(Self::Fcfs),
            "priority" => Ok(Self::Priority),
            other => Err(format!(
                "unknown scheduling policy {other:?} (fcfs, priority)"
            )),
        }
    }
}

/// The flag's spelling, which `from_str` reads back (clap shows the default with it).
impl std::fmt::Display for SchedulingPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Fcfs => "fcfs",
            Self::Priority => "priority",
        })
    }
}
