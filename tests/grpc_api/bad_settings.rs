//! Settings, with the real binary: every bad setting is refused with exit code 2 and one line
//! naming the flag, before anything is opened; settings that look odd but mean something
//! (`1.5h`, a host name) are accepted and used.
use crate::common;

use std::ffi::OsStr;

use common::*;

/// Starts `tapedeck serve` on a fresh data dir with `args`; checks it was refused as a bad
/// command line: exit code 2, one clear line naming `flag` and saying `hint`, and nothing
/// created on disk.
fn assert_bad_setting(args: &[&str], flag: &str, hint: &str) {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let mut all: Vec<&OsStr> = vec![
        OsStr::new("--listen"),
        OsStr::new("127.0.0.1:0"),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
    ];
    all.extend(args.iter().map(OsStr::new));
    let (status, stderr) = run_binary_to_exit(&all);
    assert_eq!(
        status.code(),
        Some(2),
        "{args:?} gave {status}; stderr:\n{stderr}"
    );
    assert_one_clear_line(&stderr, flag, hint);
    assert!(!data_dir.exists(), "{args:?} created the data dir");
}

#[test]
fn a_zero_gc_interval_is_refused() {
    assert_bad_setting(&["--gc-interval", "0s"], "--gc-interval", "more than zero");
}

#[test]
fn a_zero_idle_timeout_is_refused() {
    assert_bad_setting(
        &["--idle-timeout", "0ms"],
        "--idle-timeout",
        "more than zero",
    );
}

#[test]
fn zero_sizes_are_refused() {
    for flag in [
        "--max-chunk-bytes",
        "--max-recording-bytes",
        "--checkpoint-size",
        "--cache-size",
    ] {
        assert_bad_setting(&[flag, "0"], flag, "more than zero");
        assert_bad_setting(&[flag, "0KiB"], flag, "more than zero");
    }
}

#[test]
fn a_zero_live_limit_is_refused() {
    assert_bad_setting(
        &["--max-live-recordings", "0"],
        "--max-live-recordings",
        "not in 1..",
    );
}

#[test]
fn durations_that_overflow_are_refused() {
    for flag in ["--retention", "--gc-interval", "--shutdown-timeout"] {
        assert_bad_setting(&[flag, "99999999999999999d"], flag, "too large");
    }
}

#[test]
fn durations_too_long_for_the_millisecond_clock_are_refused() {
    assert_bad_setting(
        &["--retention", "18446744073709552s"],
        "--retention",
        "too large",
    );
}

#[test]
fn a_commit_interval_over_a_second_is_refused() {
    assert_bad_setting(
        &["--commit-interval", "2s"],
        "--commit-interval",
        "at most 1s",
    );
}

#[test]
fn chunks_that_cannot_fit_a_grpc_message_are_refused() {
    assert_bad_setting(
        &["--max-chunk-bytes", "4GiB"],
        "--max-chunk-bytes",
        "too large",
    );
}

#[test]
fn sizes_that_overflow_are_refused() {
    for flag in ["--max-chunk-bytes", "--max-recording-bytes"] {
        assert_bad_setting(&[flag, "99999999999GiB"], flag, "too large");
    }
}

#[test]
fn unknown_units_are_refused() {
    assert_bad_setting(&["--retention", "3 fortnights"], "--retention", "duration");
    assert_bad_setting(&["--max-chunk-bytes", "1MiBs"], "--max-chunk-bytes", "size");
}

#[test]
fn an_address_that_is_not_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr) = run_binary_to_exit(&[
        OsStr::new("--listen"),
        OsStr::new("no port here"),
        OsStr::new("--data-dir"),
        dir.path().as_os_str(),
    ]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_one_clear_line(&stderr, "--listen", "host:port");
}

#[test]
fn an_http_listen_that_is_not_an_address_suggests_off() {
    assert_bad_setting(&["--http-listen", "no"], "--http-listen", "`off` turns");
}

#[test]
fn a_cluster_without_a_node_id_names_the_missing_flag() {
    assert_bad_setting(
        &[
            "--cluster-listen",
            "127.0.0.1:0",
            "--cluster-peers",
            "1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3",
        ],
        "--node-id",
        "TAPEDECK_NODE_ID",
    );
}

#[test]
fn a_mistyped_flag_gets_the_similar_one_suggested() {
    assert_bad_setting(&["--retenion", "1h"], "--retenion", "--retention");
}

#[test]
fn node_zero_and_semicolons_in_the_peers_are_refused_saying_why() {
    let peers = "1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3";
    let cluster = |id: &'static str, peers: &'static str| {
        [
            "--node-id",
            id,
            "--cluster-listen",
            "127.0.0.1:0",
            "--cluster-peers",
            peers,
        ]
    };
    assert_bad_setting(&cluster("0", peers), "--node-id", "ids start at 1");
    assert_bad_setting(
        &cluster("1", "1=127.0.0.1:1;2=127.0.0.1:2;3=127.0.0.1:3"),
        "--cluster-peers",
        "`;` separates nothing here",
    );
}

#[test]
fn the_locator_needs_an_advertised_address_a_redis_url_and_says_which() {
    let redis = ["--redis-url", "redis://127.0.0.1:6379"];
    assert_bad_setting(&redis, "--advertised-address", "host:port");
    let advertised = ["--advertised-address", "10.0.0.1:9090"];
    assert_bad_setting(&advertised, "--redis-url", "locator");
    let no_port = [&redis[..], &["--advertised-address", "10.0.0.1"]].concat();
    assert_bad_setting(&no_port, "--advertised-address", "host:port");
    // Where a listener binds, but no client can dial.
    for nowhere in ["0.0.0.0:21503", "[::]:21503"] {
        let args = [&redis[..], &["--advertised-address", nowhere]].concat();
        assert_bad_setting(&args, "--advertised-address", "cannot dial");
    }
    let port_zero = [&redis[..], &["--advertised-address", "10.0.0.1:0"]].concat();
    assert_bad_setting(&port_zero, "--advertised-address", "host:port");
}

#[test]
fn a_bad_redis_url_is_refused_without_repeating_it() {
    let args = [
        "--redis-url",
        "http://user:hunter2@10.0.0.5:6379",
        "--advertised-address",
        "10.0.0.1:9090",
    ];
    assert_bad_setting(&args, "--redis-url", "redis://");
    let dir = tempfile::tempdir().unwrap();
    let mut all = vec![OsStr::new("--data-dir"), dir.path().as_os_str()];
    all.extend(args.iter().map(OsStr::new));
    let (_, stderr) = run_binary_to_exit(&all);
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// The configuration line a server started with `args` logs before it is killed, and every
/// line it logged.
fn logged_configuration(dir: &std::path::Path, args: &[&str]) -> (String, Vec<String>) {
    let log = LogLines::default();
    let mut child = spawn_serving(dir, args, Some(log.clone()));
    child.kill().unwrap();
    child.wait().unwrap();
    let lines = log.lock().unwrap().clone();
    let config = lines
        .iter()
        .find(|line| line.contains("starting with this configuration"))
        .expect("the effective configuration is logged")
        .clone();
    (config, lines)
}

#[test]
fn fractional_durations_and_host_names_are_accepted_and_used() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().port().to_string();
    let listen = format!("localhost:{port}");
    let args = [
        "--listen",
        &listen,
        "--log-format",
        "json",
        "--retention",
        "1.5h",
        "--max-chunk-bytes",
        "1.5KiB",
    ];
    let (config, lines) = logged_configuration(dir.path(), &args);
    assert!(config.contains(r#""retention":"1h 30m""#), "{config}");
    assert!(config.contains(r#""max_chunk_bytes":"1536""#), "{config}");
    let listening = lines
        .iter()
        .find(|line| line.contains("tapedeck listening"))
        .unwrap();
    assert!(listening.contains(&format!(":{port}")), "{listening}");
}

#[test]
fn text_logs_to_a_pipe_carry_no_colour_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let listen = free_port().to_string();
    let log = LogLines::default();
    let args = ["--listen", &listen, "--log-format", "text"];
    let mut child = spawn_serving(dir.path(), &args, Some(log.clone()));
    child.kill().unwrap();
    child.wait().unwrap();
    let lines = log.lock().unwrap();
    assert!(lines.iter().any(|l| l.contains("tapedeck listening")));
    for line in lines.iter() {
        assert!(!line.contains('\u{1b}'), "escape code in: {line:?}");
    }
}

#[test]
fn zero_http_face_bounds_are_refused_naming_flag_and_variable() {
    assert_bad_setting(
        &["--http-request-timeout", "0s"],
        "--http-request-timeout",
        "TAPEDECK_HTTP_REQUEST_TIMEOUT",
    );
    assert_bad_setting(
        &["--http-max-connections", "0"],
        "--http-max-connections",
        "TAPEDECK_HTTP_MAX_CONNECTIONS",
    );
}

#[test]
fn a_choice_refused_lists_the_values_it_takes() {
    assert_bad_setting(
        &["--log-format", "yaml"],
        "--log-format",
        "possible values: text, json",
    );
    assert_bad_setting(
        &["--on-conflict", "replace"],
        "--on-conflict",
        "possible values: supersede, reject",
    );
}

#[test]
fn a_bad_value_names_the_variable_or_the_flag_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let args = [OsStr::new("--data-dir"), data_dir.as_os_str()];
    let (status, stderr) = run_binary_to_exit_with_env(&args, &[("TAPEDECK_RETENTION", "5x")]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_one_clear_line(
        &stderr,
        "invalid value '5x' for TAPEDECK_RETENTION:",
        "--retention",
    );
    // The flag wins over the variable, and is the one named.
    let with_flag = [&args[..], &[OsStr::new("--retention"), OsStr::new("5q")]].concat();
    let (status, stderr) = run_binary_to_exit_with_env(&with_flag, &[("TAPEDECK_RETENTION", "5x")]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_one_clear_line(
        &stderr,
        "invalid value '5q' for --retention:",
        "TAPEDECK_RETENTION",
    );
    assert!(!data_dir.exists());
}

#[test]
fn a_duration_refused_lists_the_documented_units() {
    assert_bad_setting(
        &["--retention", "5x"],
        "--retention",
        "unknown unit `x`; write a number and a unit of ms, s, m, h or d",
    );
    let dir = tempfile::tempdir().unwrap();
    let (_, stderr) = run_binary_to_exit(&[
        OsStr::new("--data-dir"),
        dir.path().as_os_str(),
        OsStr::new("--gc-interval"),
        OsStr::new("5x"),
    ]);
    for undocumented in ["years", "µs", "nsec"] {
        assert!(!stderr.contains(undocumented), "{stderr}");
    }
}

#[test]
fn help_shows_defaults_as_the_readme_writes_them() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for default in [
        "[default: 30m]",
        "[default: 7d]",
        "[default: 1d]",
        "[default: 4ms]",
    ] {
        assert!(help.contains(default), "{default} missing from:\n{help}");
    }
    for long_unit in ["day", "min", "sec"] {
        assert!(
            !help.contains(&format!("{long_unit}]")) && !help.contains(&format!("{long_unit}s]")),
            "`{long_unit}` in a default:\n{help}"
        );
    }
}

#[test]
fn the_configuration_is_logged_as_its_flags_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let listen = free_port().to_string();
    let args = [
        "--listen",
        &listen,
        "--log-format",
        "text",
        "--on-conflict",
        "reject",
        "--retention",
        "1.5h",
    ];
    let (config, _) = logged_configuration(dir.path(), &args);
    for written in [
        "on_conflict=reject ",
        "http_listen=off ",
        "retention=1h 30m ",
        "max_retention=7d ",
        "tombstone_retention=1d ",
    ] {
        assert!(
            config.contains(written),
            "`{written}` missing from: {config}"
        );
    }
    for debug_form in ["Some(", "None", "Reject", "[]", "days"] {
        assert!(!config.contains(debug_form), "`{debug_form}` in: {config}");
    }
}
