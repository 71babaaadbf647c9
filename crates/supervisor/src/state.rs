//! The observable state of a process: its phase, run number, pid and timestamps, as published
//! on the process's `watch` channel and as events.

use serde::Serialize;

use super::classify::CrashCause;

/// Where a process is in its life.
///
/// `Starting → Loading → Ready → Stopping → Stopped`; any running phase can end in `Crashed`,
/// which, under a restart policy, is followed by `Starting` again for the next attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    /// Spawned; the health endpoint has not been asked yet.
    Starting,
    /// Alive but not ready: the health endpoint is not answering yet or answers non-200.
    /// `progress` is the model load fraction where the engine prints one, else `None`.
    Loading {
        progress: Option<f32>,
    },
    /// The health endpoint answered 200.
    Ready,
    Stopping,
    Stopped,
    Crashed {
        exit_code: Option<i32>,
        signal: Option<i32>,
        cause: CrashCause,
        /// `cause.explanation()`, carried along for the UI.
        explanation: String,
        /// The engine's last output lines, oldest first.
        last_lines: Vec<String>,
        /// Set when the restart policy will start the engine again.
        restart: Option<PendingRestart>,
    },
}

impl Phase {
    /// One word for messages: "loading", "crashed" …
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Loading { .. } => "loading",
            Phase::Ready => "ready",
            Phase::Stopping => "stopping",
            Phase::Stopped => "stopped",
            Phase::Crashed { .. } => "crashed",
        }
    }
}

/// A restart the policy has scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PendingRestart {
    /// The attempt number the restart will have (the first run is attempt 1).
    pub attempt: u32,
    /// When it will start, in milliseconds since the Unix epoch.
    pub at_ms: i64,
}

/// The full state of a process at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessState {
    pub name: String,
    #[serde(flatten)]
    pub phase: Phase,
    /// Which run this is: 1 for the first start, +1 per restart.
    pub attempt: u32,
    /// The engine's pid (and process group id) of the current or last run.
    pub pid: Option<u32>,
    /// When the current or last run was spawned (ms since the epoch).
    pub started_at_ms: Option<i64>,
    /// When the current run became ready; uptime as a server is now minus this.
    pub ready_at_ms: Option<i64>,
    /// When this state was entered.
    pub since_ms: i64,
}

impl ProcessState {
    /// The engine is up or on its way up (not stopped, not crashed).
    pub fn is_running(&self) -> bool {
        matches!(
            self.phase,
            Phase::Starting | Phase::Loading { .. } | Phase::Ready | Phase::Stopping
        )
    }

    /// Nothing more will happen without a new start: stopped, or crashed with no restart coming.
    pub fn is_final(&self) -> bool {
        matches!(
            self.phase,
            Phase::Stopped | Phase::Crashed { restart: None, .. }
        )
    }

    pub fn is_ready(&self) -> bool {
        self.phase == Phase::Ready
    }

    /// The crash cause, when crashed.
    pub fn crash_cause(&self) -> Option<&CrashCause> {
        match &self.phase {
            Phase::Crashed { cause, .. } => Some(cause),
            _ => None,
        }
    }

    /// One word for messages: "loading", "crashed" …
    pub fn phase_name(&self) -> &'static str {
        self.phase.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_flat_with_a_phase_tag() {
        let state = ProcessState {
            name: "llm".into(),
            phase: Phase::Crashed {
                exit_code: None,
                signal: Some(9),
                cause: CrashCause::Killed { signal: 9 },
                explanation: "killed".into(),
                last_lines: vec!["bye".into()],
                restart: Some(PendingRestart {
                    attempt: 2,
                    at_ms: 5,
                }),
            },
            attempt: 1,
            pid: Some(42),
            started_at_ms: Some(1),
            ready_at_ms: None,
            since_ms: 3,
        };
        let json = serde_json::to_value(&state).unwrap();
        assert_eq!(json["phase"], "crashed");
        assert_eq!(json["cause"]["kind"], "killed");
        assert_eq!(json["restart"]["attempt"], 2);
        assert_eq!(json["pid"], 42);
        assert!(state.crash_cause().is_some() && !state.is_final() && !state.is_running());
        let loading = serde_json::to_value(Phase::Loading {
            progress: Some(0.5),
        })
        .unwrap();
        assert_eq!(
            loading,
            serde_json::json!({"phase": "loading", "progress": 0.5})
        );
    }
}
