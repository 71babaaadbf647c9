//! A profile outside Rigdeck: the same argv as a POSIX shell script or a systemd unit, so a
//! server can run the engine without the daemon. Both writers are pure text functions, and both
//! refuse what cannot stay on its one line rather than write it (see [`ExportError`]).
//!
//! A profile with port 0 picks a free port at each start, which a file cannot do: the export
//! asks the kernel for a port free on this machine now, as a start does, writes that number and
//! says so in a comment (see [`export_port`]). A profile's own port is written as is.

use super::instances::{free_port, LaunchError};
use crate::placement::flags::{command_line, shell_quote};
use crate::profiles::profile::{check_text, no_control, LaunchProfile, ProfileError};

/// Why a profile cannot be written as a script or a unit. Each message names what and the fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExportError {
    /// A string of the profile (or a word of its argv) the file could not hold safely.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error("the engine program '{program}' is not an absolute path, which a script's `exec` and systemd's ExecStart= need: register the engine again by its full path (`rigdeck engines list` shows where it is)")]
    RelativeProgram { program: String },
}

/// The port an export writes, and the note that explains it when the profile has none: for
/// port 0 one the kernel says is free on this machine now (the same way a start picks one), so
/// the file does not pretend to a fixed port the profile never had.
pub fn export_port(profile: &LaunchProfile) -> Result<(u16, Option<String>), LaunchError> {
    match u16::try_from(profile.port) {
        Ok(0) => {
            let port = free_port(&profile.host)?;
            let note = format!(
                "the profile picks a free port at each start; this file uses {port}, which was \
                 free on this machine when it was exported: change it here, or set a port in \
                 the profile and export again"
            );
            Ok((port, Some(note)))
        }
        Ok(port) => Ok((port, None)),
        Err(_) => Err(ProfileError::PortOutOfRange { port: profile.port }.into()),
    }
}

/// `#!/bin/sh` script: exports the environment and `exec`s the argv. A word is written bare
/// only when it is made of characters no POSIX shell treats specially (letters, digits and
/// `-_./:,=+@%`); every other word is single-quoted, a `'` inside written `'\''`, so `$`,
/// backquotes, `;`, globs and the rest stay literal.
pub fn shell_script(
    profile: &LaunchProfile,
    argv: &[String],
    note: Option<&str>,
) -> Result<String, ExportError> {
    let (program, args) = exportable(profile, argv, note)?;
    let mut out = String::from("#!/bin/sh\n");
    out.push_str(&format!(
        "# Rigdeck launch profile '{}' (exported; edit freely)\n",
        profile.name
    ));
    if let Some(note) = note {
        out.push_str(&format!("# Note: {note}\n"));
    }
    out.push_str("set -e\n");
    for (key, value) in &profile.engine_env() {
        // `export 'K=v w'` is one word to the shell: valid, and safe for any value.
        out.push_str(&format!(
            "export {}\n",
            shell_quote(&format!("{key}={value}"))
        ));
    }
    out.push_str(&format!("exec {}\n", command_line(program, args)));
    Ok(out)
}

/// A systemd service: `ExecStart=` with the argv, `Environment=` per variable,
/// `Restart=on-failure`, after the network. How each word is written: see [`systemd_word`].
pub fn systemd_unit(
    profile: &LaunchProfile,
    argv: &[String],
    note: Option<&str>,
) -> Result<String, ExportError> {
    let (program, args) = exportable(profile, argv, note)?;
    let mut out = String::from("[Unit]\n");
    out.push_str(&format!(
        "Description=LLM engine from Rigdeck profile {}\n",
        specifiers_escaped(&profile.name)
    ));
    out.push_str("After=network.target\n");
    if let Some(note) = note {
        out.push_str(&format!("# Note: {note}\n"));
    }
    out.push_str("\n[Service]\nType=simple\n");
    for (key, value) in &profile.engine_env() {
        out.push_str(&format!(
            "Environment={}\n",
            systemd_word(&format!("{key}={value}"), Dollar::Literal)
        ));
    }
    let words: Vec<String> = std::iter::once(program)
        .chain(args.iter().map(String::as_str))
        .map(|w| systemd_word(w, Dollar::Expanded))
        .collect();
    out.push_str(&format!("ExecStart={}\n", words.join(" ")));
    out.push_str("Restart=on-failure\nRestartSec=5\nTimeoutStopSec=30\nKillMode=control-group\n");
    out.push_str("\n[Install]\nWantedBy=multi-user.target\n");
    Ok(out)
}

/// What both formats check before writing a line. The profile's strings get the save-time
/// checks again, since a profile stored by an older version may hold anything. Then every word
/// of the argv (which also holds strings from outside the profile, such as the engine's path)
/// must be free of control characters: a line break would end the line, and what follows would
/// be a new command in the script or a new directive in the unit (`ExecStartPre=…`). A unit
/// could carry one as the C escape `\n` inside quotes, but no profile may hold one since it is
/// refused at save time, so the exports refuse it too rather than follow a second rule. Last,
/// the program must be an absolute path: a leading `-` would be an option to `exec`, and
/// systemd reads `-@:+!|` at the start of ExecStart= as prefixes, quoted or not.
fn exportable<'a>(
    profile: &LaunchProfile,
    argv: &'a [String],
    note: Option<&str>,
) -> Result<(&'a str, &'a [String]), ExportError> {
    check_text(profile)?;
    for (i, word) in argv.iter().enumerate() {
        no_control(word, || {
            format!("word {} of the command line ({word:?})", i + 1)
        })?;
    }
    if let Some(note) = note {
        no_control(note, || "the export's note".to_owned())?;
    }
    match argv.split_first() {
        Some((program, args)) if program.starts_with('/') => Ok((program, args)),
        first => Err(ExportError::RelativeProgram {
            program: first.map(|(p, _)| p.clone()).unwrap_or_default(),
        }),
    }
}

/// How a unit setting treats `$`: ExecStart= replaces `$NAME` and `${NAME}` from the environment
/// when it starts the command (`$$` is a literal `$`); Environment= gives `$` no meaning
/// (systemd.exec(5)), so a doubled one would reach the engine doubled.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dollar {
    Expanded,
    Literal,
}

/// One word of a unit-file setting, read back by systemd as exactly `word` (systemd.syntax(7),
/// systemd.service(5) "Command lines", systemd.exec(5) Environment=):
/// - `%` starts a specifier (`%h`, `%n`, …) in ExecStart=, Environment= and Description=: `%%`.
/// - In ExecStart=, `$` is doubled (see [`Dollar`]).
/// - Words are split at whitespace. A word of anything but letters, digits and `-_./:,=+@` is
///   wrapped in double quotes, inside which systemd undoes C escapes: `\` is written `\\` and
///   `"` is written `\"`. Quoting also keeps a lone `;` (a command separator in older systemd)
///   a plain word, and a `\` never ends the line (which would continue it on the next).
///
/// Each escape is undone by a different step of systemd (specifiers, unquoting, variables) and
/// produces no character another step acts on, so the order systemd applies them in does not
/// matter. Control characters never get here (see [`exportable`]).
pub(crate) fn systemd_word(word: &str, dollar: Dollar) -> String {
    let mut escaped = specifiers_escaped(word);
    if let Dollar::Expanded = dollar {
        escaped = escaped.replace('$', "$$");
    }
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

pub(crate) fn specifiers_escaped(text: &str) -> String {
    text.replace('%', "%%")
}

/// `systemd-analyze verify`, where installed: the unit, saved as `file_name`, loads with no
/// warning about it. Shared by the tests of every unit Rigdeck writes.
#[cfg(test)]
pub(crate) fn assert_systemd_accepts(file_name: &str, unit: &str) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join(file_name);
    std::fs::write(&path, unit).expect("write the unit");
    let Ok(out) = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
    else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{unit}");
    assert!(!stderr.contains(file_name), "{stderr}\n{unit}");
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::process::Command;

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
        let script = shell_script(&profile, &argv, Some("port")).unwrap();
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
    fn systemd_unit_escapes_specifiers_and_quotes_and_doubles_dollars_only_in_exec_start() {
        let (profile, mut argv) = sample();
        argv.push("$HOME".into());
        let unit = systemd_unit(&profile, &argv, None).unwrap();
        assert!(unit.contains("After=network.target\n"));
        assert!(unit.contains("Restart=on-failure\n"));
        assert!(
            unit.contains("Environment=CUDA_VISIBLE_DEVICES=0,1\n"),
            "{unit}"
        );
        assert!(
            unit.contains("Environment=\"ODD=it's $HOME 50%%\"\n"),
            "{unit}"
        );
        assert!(unit.contains(
            r#"ExecStart=/opt/llama/llama-server -m "/models/my model.gguf" -ot "blk\\.(3|4)\\.ffn_.*_exps=CPU" "$$HOME""#
        ), "{unit}");
    }

    #[test]
    fn a_port_0_profile_exports_a_port_free_now_and_says_so() {
        let mut p = LaunchProfile::default();
        let (port, note) = export_port(&p).unwrap();
        assert_ne!(port, 0);
        let note = note.unwrap();
        assert!(
            note.contains(&format!("this file uses {port}")) && note.contains("set a port"),
            "{note}"
        );
        p.port = 9001;
        assert_eq!(export_port(&p).unwrap(), (9001, None));
        p.port = 70_000;
        assert!(export_port(&p)
            .unwrap_err()
            .to_string()
            .contains("port 70000 is out of range"));
    }

    /// Values a profile stored by an older version could hold (nothing here has a control
    /// character): each must reach the engine as exactly one word, unexpanded.
    const HOSTILE: &[&str] = &[
        "ExecStartPre=/bin/sh -c evil",
        "$HOME",
        "${HOME}",
        "$$",
        "%h",
        "50%",
        "%%n",
        "it's",
        "say \"hi\"",
        "\"",
        "'",
        r"back\slash",
        r"trailing\",
        r"a\nb",
        r"\x41",
        "two  spaces",
        " leading space",
        ";",
        "a;b",
        "$(touch pwned)",
        "`touch pwned`",
        "*",
        "~",
        "#not a comment",
        "modèle 🦙 模型",
        "",
        "--flag=\"x y\"",
    ];

    /// A program that writes its arguments, then `env -0`, NUL-separated, to stdout.
    fn echo_program(dir: &Path) -> String {
        let path = dir.join("echo-argv");
        std::fs::write(
            &path,
            "#!/bin/sh\nprintf '%s\\0' \"$@\"\nprintf '%s\\0' '--env--'\nenv -0\n",
        )
        .unwrap();
        let mut permissions = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&path, permissions).unwrap();
        path.display().to_string()
    }

    /// A profile built directly (no validation) holding every hostile value in its environment
    /// and in its extra arguments, and its argv starting with `program`.
    fn hostile(program: &str) -> (LaunchProfile, Vec<String>) {
        let mut profile = LaunchProfile {
            name: "hostile".into(),
            extra_args: HOSTILE.iter().map(|s| (*s).to_owned()).collect(),
            ..LaunchProfile::default()
        };
        for (i, value) in HOSTILE.iter().enumerate() {
            profile
                .env
                .insert(format!("HOSTILE_{i}"), (*value).to_owned());
        }
        let mut argv = vec![program.to_owned(), "--port".into(), "8123".into()];
        argv.extend(profile.extra_args.iter().cloned());
        (profile, argv)
    }

    #[test]
    fn shell_export_runs_each_hostile_value_as_exactly_one_word() {
        let dir = tempfile::tempdir().unwrap();
        let (profile, argv) = hostile(&echo_program(dir.path()));
        let script = shell_script(&profile, &argv, None).unwrap();
        let path = dir.path().join("engine.sh");
        std::fs::write(&path, &script).unwrap();
        let syntax = Command::new("bash").arg("-n").arg(&path).output().unwrap();
        assert!(syntax.status.success(), "bash -n: {syntax:?}\n{script}");
        for shell in ["sh", "bash"] {
            let run = Command::new(shell)
                .arg(&path)
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(run.status.success(), "{shell}: {run:?}\n{script}");
            let (args, env) = split_echo(&run.stdout);
            assert_eq!(args, argv[1..], "{shell}:\n{script}");
            for (name, value) in &profile.env {
                assert_eq!(env.get(name), Some(value), "{shell} {name}:\n{script}");
            }
            assert!(!dir.path().join("pwned").exists(), "{shell} ran a command");
        }
    }

    /// The arguments and the environment `echo_program` wrote.
    fn split_echo(stdout: &[u8]) -> (Vec<String>, BTreeMap<String, String>) {
        let text = String::from_utf8(stdout.to_vec()).unwrap();
        let records: Vec<&str> = text.split('\0').collect();
        let marker = records.iter().position(|r| *r == "--env--").unwrap();
        let args = records[..marker].iter().map(|s| (*s).to_owned()).collect();
        let env = records[marker + 1..]
            .iter()
            .filter_map(|r| r.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        (args, env)
    }

    #[test]
    fn systemd_export_holds_each_hostile_value_as_exactly_one_word() {
        let dir = tempfile::tempdir().unwrap();
        let (profile, argv) = hostile(&echo_program(dir.path()));
        let unit = systemd_unit(&profile, &argv, Some("a note")).unwrap();
        let directives = directives(&unit);
        let keys: Vec<&str> = directives.iter().map(|(k, _)| k.as_str()).collect();
        let mut expected = vec!["Description", "After", "Type"];
        expected.extend(std::iter::repeat_n("Environment", profile.env.len()));
        expected.extend([
            "ExecStart",
            "Restart",
            "RestartSec",
            "TimeoutStopSec",
            "KillMode",
            "WantedBy",
        ]);
        assert_eq!(keys, expected, "{unit}");
        let exec_start = &directives[keys.iter().position(|k| *k == "ExecStart").unwrap()].1;
        let words: Vec<String> = unit_words(exec_start)
            .iter()
            .map(|w| unescaped(w, Dollar::Expanded))
            .collect();
        assert_eq!(words, argv, "{unit}");
        let env: BTreeMap<String, String> = directives
            .iter()
            .filter(|(k, _)| k == "Environment")
            .map(|(_, value)| {
                let words = unit_words(value);
                assert_eq!(words.len(), 1, "one assignment per line: {value}");
                let assignment = unescaped(&words[0], Dollar::Literal);
                let (k, v) = assignment.split_once('=').unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect();
        assert_eq!(env, profile.env, "{unit}");
        assert_systemd_accepts("rigdeck-hostile.service", &unit);
    }

    /// `(key, value)` of every directive line, in order; sections and comments skipped. Any
    /// other line (a continuation, a stray word) fails the test.
    fn directives(unit: &str) -> Vec<(String, String)> {
        unit.lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('['))
            .map(|l| {
                let (key, value) = l.split_once('=').unwrap_or_else(|| panic!("{l:?}"));
                assert!(!value.ends_with('\\'), "continued line: {l:?}");
                (key.to_owned(), value.to_owned())
            })
            .collect()
    }

    /// systemd's word splitting of a setting: whitespace separates words; a word may be wrapped
    /// in double quotes, inside which `\\` and `\"` stand for `\` and `"`. (Other C escapes are
    /// never written, so they fail the test.)
    fn unit_words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                ' ' => continue,
                '"' => {
                    let mut word = String::new();
                    loop {
                        match chars.next().expect("closing quote") {
                            '"' => break,
                            '\\' => match chars.next() {
                                Some(e @ ('\\' | '"')) => word.push(e),
                                other => panic!("escape \\{other:?} in {line}"),
                            },
                            c => word.push(c),
                        }
                    }
                    assert!(matches!(chars.peek(), None | Some(' ')), "{line}");
                    words.push(word);
                }
                c => {
                    assert!(!matches!(c, '\\' | '\''), "unquoted {c} in {line}");
                    let mut word = c.to_string();
                    while let Some(&next) = chars.peek().filter(|n| **n != ' ') {
                        assert!(!matches!(next, '"' | '\\' | '\''), "{line}");
                        word.push(next);
                        chars.next();
                    }
                    words.push(word);
                }
            }
        }
        words
    }

    /// Specifiers, then (ExecStart=) variables, undone as systemd does; a lone `%` or `$` would
    /// expand to something else, so it fails the test.
    fn unescaped(word: &str, dollar: Dollar) -> String {
        let undouble = |text: &str, c: char| {
            let mut out = String::new();
            let mut chars = text.chars();
            while let Some(x) = chars.next() {
                if x == c {
                    assert_eq!(chars.next(), Some(c), "{c} would expand in {word:?}");
                }
                out.push(x);
            }
            out
        };
        let word = undouble(word, '%');
        match dollar {
            Dollar::Expanded => undouble(&word, '$'),
            Dollar::Literal => word,
        }
    }

    #[test]
    fn exports_refuse_a_line_break_or_other_control_character_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let program = echo_program(dir.path());
        let injected = "0\nExecStartPre=/bin/sh -c evil";
        let refused = |change: &dyn Fn(&mut LaunchProfile, &mut Vec<String>)| {
            let (mut profile, mut argv) = hostile(&program);
            change(&mut profile, &mut argv);
            let shell = shell_script(&profile, &argv, None).unwrap_err().to_string();
            let unit = systemd_unit(&profile, &argv, None).unwrap_err().to_string();
            assert_eq!(shell, unit);
            shell
        };
        assert_eq!(
            refused(&|p, _| {
                p.env.insert("CUDA_VISIBLE_DEVICES".into(), injected.into());
            }),
            "environment value of CUDA_VISIBLE_DEVICES contains a line break (U+000A): remove it"
        );
        let message = refused(&|p, argv| {
            p.extra_args.push(injected.into());
            argv.push(injected.into());
        });
        let field = format!("extra argument {} (", HOSTILE.len() + 1);
        assert!(
            message.starts_with(&field) && message.contains("a line break (U+000A)"),
            "{message}"
        );
        for (c, name) in [
            ('\r', "a carriage return (U+000D)"),
            ('\t', "a tab (U+0009)"),
            ('\0', "a NUL byte (U+0000)"),
            ('\u{1b}', "an escape character (U+001B)"),
            ('\u{7f}', "a delete character (U+007F)"),
            ('\u{85}', "a control character (U+0085)"),
        ] {
            let message = refused(&|p, _| p.api_key = Some(format!("key{c}")));
            assert_eq!(message, format!("API key contains {name}: remove it"));
        }
        assert!(refused(&|p, _| {
            p.env.insert("A\nB".into(), "1".into());
        })
        .starts_with(r#"environment variable name "A\nB" contains a line break"#));
        assert!(refused(&|p, _| {
            p.env.insert("A B".into(), "1".into());
        })
        .contains("'A B' is not valid"));
        assert!(refused(&|p, _| p.name = "a\nb".into()).starts_with("profile name contains"));
        // Words that are not the profile's own strings: the engine's path.
        assert!(
            refused(&|_, argv| argv[0] = "/opt/llama\n/llama-server".into())
                .starts_with(r#"word 1 of the command line ("/opt/llama\n/llama-server")"#)
        );
        assert!(refused(&|_, argv| argv[0] = "-llama-server".into())
            .contains("'-llama-server' is not an absolute path"));
    }
}
