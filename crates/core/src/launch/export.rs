//! A profile outside Rigdeck: the same argv as a POSIX shell script or a systemd unit, so a
//! server can run the engine without the daemon. Both are pure text functions.

use crate::placement::flags::command_line;

use super::profile::LaunchProfile;

/// What a profile with port 0 (free port at each start) is written with: a file needs one.
pub const EXPORT_PORT_FOR_AUTO: u16 = 8080;

/// The port an export uses, and a note when it differs from the profile's.
pub fn export_port(profile: &LaunchProfile) -> (u16, Option<String>) {
    match u16::try_from(profile.port) {
        Ok(0) | Err(_) => (
            EXPORT_PORT_FOR_AUTO,
            Some(format!(
                "the profile picks a free port at each start; this file uses {EXPORT_PORT_FOR_AUTO}"
            )),
        ),
        Ok(port) => (port, None),
    }
}

/// `#!/bin/sh` script: exports the environment and `exec`s the argv, every word quoted.
pub fn shell_script(profile: &LaunchProfile, argv: &[String], note: Option<&str>) -> String {
    let mut out = String::from("#!/bin/sh\n");
    out.push_str(&format!(
        "# Rigdeck launch profile '{}' (exported; edit freely)\n",
        profile.name
    ));
    if let Some(note) = note {
        out.push_str(&format!("# Note: {note}\n"));
    }
    out.push_str("set -e\n");
    for (key, value) in &profile.env {
        // `export 'K=v w'` is one word to the shell: valid, and safe for any value.
        out.push_str(&format!(
            "export {}\n",
            command_line(&format!("{key}={value}"), &[])
        ));
    }
    if let Some((program, args)) = argv.split_first() {
        out.push_str(&format!("exec {}\n", command_line(program, args)));
    }
    out
}

/// A systemd service: `ExecStart=` with the argv, `Restart=on-failure`, after the network.
pub fn systemd_unit(profile: &LaunchProfile, argv: &[String], note: Option<&str>) -> String {
    let mut out = String::from("[Unit]\n");
    out.push_str(&format!(
        "Description=LLM engine from Rigdeck profile {}\n",
        systemd_escape(&profile.name)
    ));
    out.push_str("After=network.target\n");
    if let Some(note) = note {
        out.push_str(&format!("# Note: {note}\n"));
    }
    out.push_str("\n[Service]\nType=simple\n");
    for (key, value) in &profile.env {
        out.push_str(&format!(
            "Environment={}\n",
            systemd_word(&format!("{key}={value}"))
        ));
    }
    let words: Vec<String> = argv.iter().map(|w| systemd_word(w)).collect();
    out.push_str(&format!("ExecStart={}\n", words.join(" ")));
    out.push_str("Restart=on-failure\nRestartSec=5\nTimeoutStopSec=30\nKillMode=control-group\n");
    out.push_str("\n[Install]\nWantedBy=multi-user.target\n");
    out
}

/// One word of a unit-file command line. systemd splits on whitespace, honours double quotes
/// with C-style backslash escapes, and expands `%` specifiers and `$VARS`: those are doubled.
fn systemd_word(word: &str) -> String {
    let escaped = systemd_escape(word);
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:,=+@".contains(c));
    if plain {
        escaped
    } else {
        format!("\"{}\"", escaped.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

fn systemd_escape(text: &str) -> String {
    text.replace('%', "%%").replace('$', "$$")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (LaunchProfile, Vec<String>) {
        let mut profile = LaunchProfile {
            name: "glm".into(),
            ..LaunchProfile::default()
        };
        profile
            .env
            .insert("CUDA_VISIBLE_DEVICES".into(), "0,1".into());
        profile.env.insert("ODD".into(), "it's $HOME 50%".into());
        let argv = vec![
            "/opt/llama/llama-server".to_owned(),
            "-m".into(),
            "/models/my model.gguf".into(),
            "-ot".into(),
            r"blk\.(3|4)\.ffn_.*_exps=CPU".into(),
        ];
        (profile, argv)
    }

    #[test]
    fn shell_script_quotes_every_word_that_needs_it() {
        let (profile, argv) = sample();
        let script = shell_script(&profile, &argv, Some("port"));
        assert!(script.starts_with("#!/bin/sh\n"));
        assert!(
            script.contains("export CUDA_VISIBLE_DEVICES=0,1\n"),
            "{script}"
        );
        assert!(
            script.contains(r#"export 'ODD=it'\''s $HOME 50%'"#),
            "{script}"
        );
        assert!(script.contains(
            r"exec /opt/llama/llama-server -m '/models/my model.gguf' -ot 'blk\.(3|4)\.ffn_.*_exps=CPU'"
        ), "{script}");
        assert!(script.contains("# Note: port"));
    }

    #[test]
    fn systemd_unit_escapes_specifiers_and_quotes() {
        let (profile, argv) = sample();
        let unit = systemd_unit(&profile, &argv, None);
        assert!(unit.contains("After=network.target\n"));
        assert!(unit.contains("Restart=on-failure\n"));
        assert!(
            unit.contains("Environment=CUDA_VISIBLE_DEVICES=0,1\n"),
            "{unit}"
        );
        assert!(
            unit.contains("Environment=\"ODD=it's $$HOME 50%%\"\n"),
            "{unit}"
        );
        assert!(unit.contains(
            r#"ExecStart=/opt/llama/llama-server -m "/models/my model.gguf" -ot "blk\\.(3|4)\\.ffn_.*_exps=CPU""#
        ), "{unit}");
    }

    #[test]
    fn auto_port_is_written_as_a_fixed_one_with_a_note() {
        let mut p = LaunchProfile::default();
        assert_eq!(export_port(&p).0, EXPORT_PORT_FOR_AUTO);
        assert!(export_port(&p).1.is_some());
        p.port = 9001;
        assert_eq!(export_port(&p), (9001, None));
    }
}
