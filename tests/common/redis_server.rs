//! A real `redis-server` on a free loopback port, with no persistence, for the locator's
//! tests; killed when dropped. It can be killed and started again on the same port.
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{WAIT, free_port};

/// A running `redis-server`.
pub(crate) struct RedisServer {
    pub(crate) addr: SocketAddr,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one on a free port and waits until it answers PING.
    pub(crate) fn start() -> RedisServer {
        let mut server = RedisServer {
            addr: free_port(),
            child: None,
        };
        server.restart();
        server
    }

    /// Its URL.
    pub(crate) fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// A connection to it.
    pub(crate) async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// SIGKILLs it: everything it held is gone.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it (again) on its port, empty, and waits until it answers PING.
    pub(crate) fn restart(&mut self) {
        self.kill();
        let child = Command::new("redis-server")
            .args(["--port", &self.addr.port().to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start redis-server; install Debian's redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + WAIT;
        let client = redis::Client::open(self.url()).unwrap();
        loop {
            if let Ok(mut conn) = client.get_connection()
                && redis::cmd("PING").query::<String>(&mut conn).is_ok()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer in time"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
