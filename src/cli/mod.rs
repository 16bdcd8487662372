//! The client commands of the `tapedeck` binary, on [`tapedeck::client`]: record from stdin,
//! replay to stdout, list, inspect, delete, cancel, check, cluster status. Each prints its result on stdout
//! (a table or JSON) and any error as one line on stderr, with a non-zero exit code.
mod cluster;
pub(crate) mod db;
pub(crate) mod escape;
mod output;
pub(crate) mod token;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use tapedeck::client::{Client, ClientConfig, RecordOptions};
use tapedeck::pb::tapedeck::RecordingStatus;

/// Where the server is and how to authenticate, shared by every client command.
#[derive(clap::Args, Debug)]
pub(crate) struct ServerArgs {
    /// The server, `host:port` or a URL.
    #[arg(long, env = "TAPEDECK_SERVER", default_value = "127.0.0.1:9090")]
    server: String,
    /// An API key, sent as `x-api-key`.
    #[arg(long, env = "TAPEDECK_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// A signed grant, sent as `authorization: Bearer …`.
    #[arg(long, env = "TAPEDECK_TOKEN", hide_env_values = true, value_parser = parse_token)]
    token: Option<String>,
    /// PEM CA certificate of the server's TLS certificate: connect over TLS.
    #[arg(long, env = "TAPEDECK_TLS_CA")]
    tls_ca: Option<PathBuf>,
}

/// A grant as `--token` takes it: the token alone, as the client puts the word `Bearer` in
/// front of it. Refused without repeating it.
fn parse_token(text: &str) -> Result<String, String> {
    let first_word = text.split_whitespace().next().unwrap_or_default();
    if first_word.eq_ignore_ascii_case("bearer") {
        return Err(
            "give the token alone, without the word `Bearer` in front of it \
                    (tapedeck sends `authorization: Bearer <token>` itself)"
                .into(),
        );
    }
    Ok(text.to_string())
}

/// A client command.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum ClientCommand {
    /// Record stdin as conversation ID's response.
    Record {
        #[command(flatten)]
        server: ServerArgs,
        /// The conversation.
        id: String,
        /// Resume its recording: stdin holds the response from its start again; what is
        /// already committed is skipped, the rest appended.
        #[arg(long)]
        resume: bool,
    },
    /// Print conversation ID's response on stdout.
    Replay {
        #[command(flatten)]
        server: ServerArgs,
        /// The conversation.
        id: String,
        /// Start at this byte offset.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Follow a live recording until it ends (without: stop at what is committed now).
        #[arg(long)]
        follow: bool,
        /// One JSON line per recorded chunk: index, commit time, offset, content.
        #[arg(long)]
        chunked: bool,
    },
    /// List recordings, oldest first.
    Ls {
        #[command(flatten)]
        server: ServerArgs,
        /// Only recordings with this status (recording, completed, cancelled, interrupted,
        /// failed, deleted).
        #[arg(long)]
        status: Option<String>,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one recording's metadata, as JSON.
    Inspect {
        #[command(flatten)]
        server: ServerArgs,
        /// The conversation.
        id: String,
    },
    /// Delete a recording (a live one is cancelled first).
    Rm {
        #[command(flatten)]
        server: ServerArgs,
        /// The conversation.
        id: String,
    },
    /// Ask the producer of a live recording to stop.
    Cancel {
        #[command(flatten)]
        server: ServerArgs,
        /// The conversation.
        id: String,
    },
    /// Show the cluster as this node sees it: leader, term, log; on the leader, each node's
    /// lag and health.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Print which of the conversations have a live recording.
    Check {
        #[command(flatten)]
        server: ServerArgs,
        /// The conversations.
        #[arg(required = true)]
        ids: Vec<String>,
        /// JSON instead of one id a line.
        #[arg(long)]
        json: bool,
    },
}

/// `tapedeck cluster …`.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum ClusterCommand {
    /// Leader, term, log and (asked of the leader) each node's lag and health.
    Status {
        #[command(flatten)]
        server: ServerArgs,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

impl ClientCommand {
    fn server(&self) -> &ServerArgs {
        match self {
            ClientCommand::Record { server, .. }
            | ClientCommand::Replay { server, .. }
            | ClientCommand::Ls { server, .. }
            | ClientCommand::Inspect { server, .. }
            | ClientCommand::Rm { server, .. }
            | ClientCommand::Cancel { server, .. }
            | ClientCommand::Check { server, .. }
            | ClientCommand::Cluster(ClusterCommand::Status { server, .. }) => server,
        }
    }
}

/// Runs `command` against the server it names; prints an error as one line.
pub(crate) fn run(command: ClientCommand) -> ExitCode {
    let key_with_name = command
        .server()
        .api_key
        .as_deref()
        .is_some_and(|key| key.contains('='));
    let outcome = tokio::runtime::Runtime::new()
        .context("starting the async runtime")
        .and_then(|runtime| runtime.block_on(execute(command)));
    match outcome {
        Ok(code) => code,
        // The reader of its output went away (`tapedeck replay x | head`): quietly, with the
        // status a process killed by SIGPIPE has, as `cat` would.
        Err(err) if broken_pipe(&err) => ExitCode::from(128 + 13),
        Err(err) => {
            let message = crate::one_line(&err);
            eprintln!(
                "tapedeck: error: {message}{}",
                hint(&message, key_with_name)
            );
            ExitCode::FAILURE
        }
    }
}

/// Whether `err` comes from writing to a pipe whose reader has gone.
fn broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// What to do about a refused credential, which the server's words cannot say: they name
/// headers, and this client's flags differ from the server's.
fn hint(message: &str, key_with_name: bool) -> &'static str {
    if message.contains("missing credentials") {
        "; give this command --api-key SECRET or --token GRANT (TAPEDECK_API_KEY, TAPEDECK_TOKEN)"
    } else if message.contains("unknown API key") && key_with_name {
        "; this command's --api-key takes the secret alone, not NAME=SECRET as the server's does"
    } else {
        ""
    }
}

async fn execute(command: ClientCommand) -> Result<ExitCode> {
    let server = command.server();
    let config = ClientConfig {
        api_key: server.api_key.clone(),
        bearer: server.token.clone(),
        tls_ca: server.tls_ca.clone(),
        ..ClientConfig::new(server.server.clone())
    };
    let client = Client::connect(config).await.map_err(status_error)?;
    let mut out = std::io::stdout().lock();
    match command {
        ClientCommand::Record { id, resume, .. } => record(&client, &id, resume).await?,
        ClientCommand::Replay {
            id,
            from,
            follow,
            chunked,
            ..
        } => replay(&client, &id, from, follow, chunked, &mut out).await?,
        ClientCommand::Ls { status, json, .. } => {
            let status = status.as_deref().map(output::parse_status).transpose()?;
            let listed = list_all(&client, status).await?;
            output::recordings(&listed.recordings, json, &mut out)?;
            // On stderr, so that the listing itself stays what a script parses.
            if !listed.unanswered.is_empty() {
                eprintln!(
                    "tapedeck: no answer from the instances at {}; what they hold is missing above",
                    listed.unanswered.join(", ")
                );
            }
            if let Some(why) = listed.object_store_down {
                eprintln!(
                    "tapedeck: the object store did not answer ({why}); the recordings only it holds are missing above"
                );
            }
        }
        ClientCommand::Inspect { id, .. } => {
            let info = client.get(id.as_bytes()).await.map_err(status_error)?;
            writeln!(out, "{}", escape::json_line(&output::recording_json(&info)))?;
        }
        ClientCommand::Rm { id, .. } => {
            let existed = client.delete(id.as_bytes()).await.map_err(status_error)?;
            let what = if existed {
                "deleted"
            } else {
                "nothing to delete"
            };
            writeln!(out, "{}: {what}", escape::for_terminal(&id))?;
        }
        ClientCommand::Cancel { id, .. } => {
            if !client.cancel(id.as_bytes()).await.map_err(status_error)? {
                // Escaped once, with the rest of the error line, where it is printed.
                bail!("conversation {id} has no live recording to cancel");
            }
            writeln!(out, "{}: cancelled", escape::for_terminal(&id))?;
        }
        ClientCommand::Cluster(ClusterCommand::Status { json, .. }) => {
            let status = client.cluster_status().await.map_err(status_error)?;
            cluster::status(&status, json, &mut out)?;
        }
        ClientCommand::Check { ids, json, .. } => {
            let asked: Vec<Vec<u8>> = ids.iter().map(|id| id.as_bytes().to_vec()).collect();
            let live = client.check(&asked).await.map_err(status_error)?;
            output::ids(&live, json, &mut out)?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Bytes read from stdin at a time, and so the largest chunk sent.
const STDIN_CHUNK: usize = 16 * 1024;

/// Records stdin, in chunks of whole UTF-8 characters as they arrive.
async fn record(client: &Client, id: &str, resume: bool) -> Result<()> {
    let options = RecordOptions {
        resume_from: resume.then_some(0),
        retention: None,
    };
    let recording = client
        .record(id.as_bytes(), options)
        .await
        .map_err(status_error)?;
    // stdin is read on a blocking thread; chunks come over a small queue (backpressure).
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<String>>(4);
    std::thread::spawn(move || read_stdin(tx));
    let mut total = 0u64;
    while let Some(chunk) = rx.recv().await {
        let chunk = chunk.context("reading stdin")?;
        total += chunk.len() as u64;
        if recording.send(&chunk).await.is_err() {
            break; // the call ended; complete() says why
        }
    }
    recording.complete().await.map_err(status_error)?;
    eprintln!(
        "tapedeck: recorded {total} bytes as {}",
        escape::for_terminal(id)
    );
    Ok(())
}

/// Reads stdin to its end, sending chunks that end on a character boundary.
fn read_stdin(tx: tokio::sync::mpsc::Sender<std::io::Result<String>>) {
    let mut stdin = std::io::stdin().lock();
    let mut pending: Vec<u8> = Vec::new();
    let mut buffer = vec![0u8; STDIN_CHUNK];
    loop {
        let read = match stdin.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => {
                let _ = tx.blocking_send(Err(err));
                return;
            }
        };
        pending.extend_from_slice(&buffer[..read]);
        let complete = match std::str::from_utf8(&pending) {
            Ok(_) => pending.len(),
            // An incomplete character at the end waits for the rest of its bytes.
            Err(err) if err.error_len().is_none() => err.valid_up_to(),
            Err(err) => {
                let at = err.valid_up_to();
                let _ = tx.blocking_send(Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("stdin is not UTF-8 text (at byte {at} of a read)"),
                )));
                return;
            }
        };
        if complete > 0 {
            let rest = pending.split_off(complete);
            let text = String::from_utf8(std::mem::replace(&mut pending, rest))
                .expect("checked to be UTF-8 above");
            if tx.blocking_send(Ok(text)).is_err() {
                return;
            }
        }
    }
    if !pending.is_empty() {
        let _ = tx.blocking_send(Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stdin ends inside a UTF-8 character",
        )));
    }
}

/// Replays to `out`: up to what is committed now, or (with `follow`) until the recording ends.
async fn replay(
    client: &Client,
    id: &str,
    from: u64,
    follow: bool,
    chunked: bool,
    out: &mut impl Write,
) -> Result<()> {
    // Without --follow, a live recording is read up to its committed length at the start.
    let stop_at = match follow {
        true => None,
        false => match client.get(id.as_bytes()).await {
            Ok(info) if info.status == RecordingStatus::Recording as i32 => Some(info.byte_length),
            _ => None,
        },
    };
    if stop_at.is_some_and(|end| end <= from) {
        return Ok(());
    }
    let mut replay = if chunked {
        client.replay_chunks(id.as_bytes(), from).await
    } else {
        client.replay(id.as_bytes(), from).await
    }
    .map_err(status_error)?;
    while let Some(piece) = replay.next().await.map_err(status_error)? {
        if chunked {
            writeln!(out, "{}", escape::json_line(&output::message_json(&piece)))?;
        } else {
            out.write_all(piece.content.as_bytes())?;
        }
        out.flush()?;
        if stop_at.is_some_and(|end| piece.offset >= end) {
            break;
        }
    }
    Ok(())
}

/// Every page of the listing, and the instances that did not answer for some page.
/// Every recording the server lists, and what did not answer.
struct Listed {
    recordings: Vec<tapedeck::pb::tapedeck::Recording>,
    /// Instances (with a locator) that did not answer.
    unanswered: Vec<String>,
    /// Why the object store's pages could not be read, if they could not: the local
    /// recordings are listed all the same.
    object_store_down: Option<String>,
}

async fn list_all(client: &Client, status: Option<RecordingStatus>) -> Result<Listed> {
    let mut listed = Listed {
        recordings: Vec::new(),
        unanswered: Vec::new(),
        object_store_down: None,
    };
    let mut token = String::new();
    loop {
        let page = match client.list(status, 1000, &token).await {
            Ok(page) => page,
            Err(status)
                if status.code() == tonic::Code::Unavailable
                    && tapedeck::recorder::Listing::is_object_store_token(&token) =>
            {
                listed.object_store_down = Some(status.message().to_string());
                return Ok(listed);
            }
            Err(status) => return Err(status_error(status)),
        };
        listed.recordings.extend(page.recordings);
        for address in page.unanswered_instances {
            if !listed.unanswered.contains(&address) {
                listed.unanswered.push(address);
            }
        }
        if page.next_page_token.is_empty() {
            return Ok(listed);
        }
        token = page.next_page_token;
    }
}

/// A status from the server, as an error that reads as one line.
fn status_error(status: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{} ({:?})", status.message(), status.code())
}
