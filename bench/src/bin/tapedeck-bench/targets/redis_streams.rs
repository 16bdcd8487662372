//! Redis Streams, the usual alternative: one stream per recording, `XADD` per token (the reply
//! is the ack), an `end` entry as the completion marker, live readers on `XREAD BLOCK` from
//! their last id, catch-up with `XRANGE`. The bench starts its own `redis-server` on a free
//! loopback port with a temp dir, AOF on, and the fsync policy under test.
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use redis::aio::MultiplexedConnection;
use redis::io::tcp::TcpSettings;
use redis::{AsyncConnectionConfig, Client, IntoConnectionInfo, Value};

use super::{ChildGuard, Environment, Target, free_port, temp_dir, wait_ready};

/// Entries read per `XREAD` / `XRANGE`.
const READ_COUNT: usize = 1000;

/// When Redis fsyncs its append-only file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Appendfsync {
    /// Before replying to the commands of each event-loop turn: durable acks.
    Always,
    /// Once a second in the background: an ack may be lost in a crash.
    Everysec,
}

/// A private `redis-server` and a pool of multiplexed connections to it.
pub(crate) struct RedisStreams {
    client: Client,
    connections: Vec<MultiplexedConnection>,
    fsync: Appendfsync,
    pid: u32,
    _server: ChildGuard,
    _dir: tempfile::TempDir,
}

/// No per-request timeout: `XREAD BLOCK 0` waits as long as the recording is live, and under
/// heavy load an fsync'd reply may take long; the bench bounds every phase itself.
fn connection_config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new().set_response_timeout(None)
}

impl RedisStreams {
    /// Starts `redis-server` with AOF and `fsync`, then opens `connections` connections.
    pub(crate) async fn start(
        env: &Environment,
        fsync: Appendfsync,
        connections: usize,
    ) -> Result<RedisStreams> {
        let dir = temp_dir(&env.work_dir, "redis-")?;
        let port = free_port()?;
        let policy = match fsync {
            Appendfsync::Always => "always",
            Appendfsync::Everysec => "everysec",
        };
        let child = Command::new(&env.redis_server)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .arg("--dir")
            .arg(dir.path())
            .args(["--appendonly", "yes", "--appendfsync", policy])
            // AOF is the durability under test; RDB snapshots would add forks and writes.
            .args(["--save", ""])
            .args(["--daemonize", "no", "--protected-mode", "yes"])
            .args(["--maxclients", "10000"])
            .arg("--logfile")
            .arg(dir.path().join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| {
                format!(
                    "spawning {} (install it with `apt-get install -y redis-server`)",
                    env.redis_server.display()
                )
            })?;
        let mut child = ChildGuard::new(child);
        // redis-rs leaves Nagle on by default; Redis itself and tapedeck's clients turn it off,
        // and small pipelined commands behind Nagle wait for delayed ACKs (up to 40 ms).
        let info = format!("redis://127.0.0.1:{port}/")
            .into_connection_info()?
            .set_tcp_settings(TcpSettings::default().set_nodelay(true));
        let client = Client::open(info)?;
        wait_ready(&mut child, "redis-server", || async {
            let mut conn = client.get_multiplexed_async_connection().await?;
            let _: String = redis::cmd("PING").query_async(&mut conn).await?;
            Ok(())
        })
        .await?;
        let mut pool = Vec::with_capacity(connections.max(1));
        for _ in 0..connections.max(1) {
            pool.push(
                client
                    .get_multiplexed_async_connection_with_config(&connection_config())
                    .await?,
            );
        }
        Ok(RedisStreams {
            client,
            connections: pool,
            fsync,
            pid: child.pid(),
            _server: child,
            _dir: dir,
        })
    }

    fn connection(&self, lane: usize) -> MultiplexedConnection {
        self.connections[lane % self.connections.len()].clone()
    }
}

fn stream_key(name: &str) -> String {
    format!("rec:{name}")
}

impl Target for RedisStreams {
    type Producer = RedisProducer;
    type Subscriber = RedisSubscriber;

    async fn record(&self, lane: usize, name: &str) -> Result<RedisProducer> {
        Ok(RedisProducer {
            conn: self.connection(lane),
            key: stream_key(name),
        })
    }

    async fn subscribe(&self, _lane: usize, name: &str) -> Result<RedisSubscriber> {
        // A blocked XREAD holds its connection, so every live reader has its own.
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&connection_config())
            .await?;
        Ok(RedisSubscriber {
            conn,
            key: stream_key(name),
            last_id: "0-0".into(),
            ended: false,
        })
    }

    async fn replay(&self, lane: usize, name: &str) -> Result<u64> {
        let mut conn = self.connection(lane);
        let key = stream_key(name);
        let mut start = "-".to_string();
        let mut bytes = 0;
        loop {
            let reply: Value = redis::cmd("XRANGE")
                .arg(&key)
                .arg(&start)
                .arg("+")
                .arg("COUNT")
                .arg(READ_COUNT)
                .query_async(&mut conn)
                .await?;
            let entries = array(&reply)?;
            let mut data = Vec::new();
            let mut last_id = String::new();
            let ended = collect(entries, &mut data, &mut last_id)?;
            bytes += data.len() as u64;
            if ended || entries.len() < READ_COUNT {
                return Ok(bytes);
            }
            start = format!("({last_id}");
        }
    }

    fn data_pid(&self) -> Option<u32> {
        Some(self.pid)
    }

    fn durable(&self) -> bool {
        self.fsync == Appendfsync::Always
    }
}

fn array(value: &Value) -> Result<&[Value]> {
    match value {
        Value::Array(items) => Ok(items),
        other => bail!("expected an array, got {other:?}"),
    }
}

fn bulk(value: &Value) -> Result<&[u8]> {
    match value {
        Value::BulkString(bytes) => Ok(bytes),
        other => bail!("expected a bulk string, got {other:?}"),
    }
}

/// Appends the tokens of stream entries (`[id, [field, value, ...]]` each, as `XRANGE` and
/// `XREAD` return them) to `out` and sets `last_id`; true once the completion marker was seen.
/// Parsed from the raw reply: the client's typed stream replies cost more than Redis itself.
fn collect(entries: &[Value], out: &mut Vec<u8>, last_id: &mut String) -> Result<bool> {
    for entry in entries {
        let [id, fields] = array(entry)? else {
            bail!("malformed stream entry {entry:?}");
        };
        let id = bulk(id)?;
        *last_id = String::from_utf8_lossy(id).into_owned();
        match array(fields)? {
            [field, value] if bulk(field)? == b"t" => out.extend_from_slice(bulk(value)?),
            [field, _] if bulk(field)? == b"end" => return Ok(true),
            other => bail!("unexpected stream fields {other:?}"),
        }
    }
    Ok(false)
}

/// `XADD`s to one stream.
pub(crate) struct RedisProducer {
    conn: MultiplexedConnection,
    key: String,
}

impl super::Producer for RedisProducer {
    async fn send(&mut self, token: String) -> Result<u64> {
        let _: String = redis::cmd("XADD")
            .arg(&self.key)
            .arg("*")
            .arg("t")
            .arg(token.as_bytes())
            .query_async(&mut self.conn)
            .await?;
        Ok(1)
    }

    /// One pipeline of `XADD`s: a single round trip.
    async fn load(&mut self, tokens: Vec<String>) -> Result<u64> {
        let mut pipe = redis::pipe();
        for token in &tokens {
            pipe.cmd("XADD")
                .arg(&self.key)
                .arg("*")
                .arg("t")
                .arg(token.as_bytes())
                .ignore();
        }
        let () = pipe.query_async(&mut self.conn).await?;
        Ok(tokens.len() as u64)
    }

    async fn finish(mut self) -> Result<u64> {
        let _: String = redis::cmd("XADD")
            .arg(&self.key)
            .arg("*")
            .arg("end")
            .arg(1)
            .query_async(&mut self.conn)
            .await?;
        Ok(0)
    }
}

/// Follows one stream with `XREAD BLOCK` on its own connection.
pub(crate) struct RedisSubscriber {
    conn: MultiplexedConnection,
    key: String,
    last_id: String,
    ended: bool,
}

impl super::Subscriber for RedisSubscriber {
    async fn next(&mut self) -> Result<Option<Vec<u8>>> {
        while !self.ended {
            let reply: Value = redis::cmd("XREAD")
                .arg("COUNT")
                .arg(READ_COUNT)
                .arg("BLOCK")
                .arg(0)
                .arg("STREAMS")
                .arg(&self.key)
                .arg(&self.last_id)
                .query_async(&mut self.conn)
                .await?;
            if reply == Value::Nil {
                continue;
            }
            // `[[key, entries]]`: one stream was asked for.
            let mut data = Vec::new();
            for stream in array(&reply)? {
                let [_key, entries] = array(stream)? else {
                    bail!("malformed XREAD reply {stream:?}");
                };
                self.ended |= collect(array(entries)?, &mut data, &mut self.last_id)?;
            }
            if !data.is_empty() {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }
}
