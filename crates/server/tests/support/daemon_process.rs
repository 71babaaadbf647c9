//! The daemon as its own process (`rigdeck serve`), for tests that kill it without warning.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A `rigdeck serve` child; dropping it kills it and the engines it left.
pub struct Daemon(pub Child, pub std::path::PathBuf);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        super::kill_engines(&self.1);
    }
}

impl Daemon {
    /// Ends the daemon with SIGKILL: no shutdown code runs (the engines go with the test's reaper).
    pub fn kill_hard(self) {
        signal(&self.0, "-9");
    }

    /// Ends the daemon with SIGKILL and leaves its engines running, as a crash would, for the
    /// next daemon to adopt.
    pub fn crash(mut self) {
        signal(&self.0, "-9");
        let _ = self.0.wait();
        // Not dropped: dropping would end the engines too.
        std::mem::forget(self);
    }

    /// Stops the daemon as `systemctl stop` does (SIGTERM) and waits for it to exit: `true`
    /// when it exited within `within`.
    pub fn stop(mut self, within: Duration) -> bool {
        signal(&self.0, "-TERM");
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

fn signal(child: &Child, which: &str) {
    std::process::Command::new("kill")
        .args([which, &child.id().to_string()])
        .status()
        .expect("run kill");
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .expect("read the port")
        .port()
}

/// Starts `rigdeck serve` on `port` with `dir`'s config and data, once it answers.
pub async fn serve(dir: &std::path::Path, port: u16) -> Daemon {
    let child = super::rigdeck_in(dir)
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rigdeck serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    while reqwest::get(format!("http://127.0.0.1:{port}/login"))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the daemon did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Daemon(child, dir.join("data"))
}
