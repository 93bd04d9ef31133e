//! A throwaway PostgreSQL server for tests: `initdb` in a temp directory,
//! `pg_ctl` on a free loopback port, trust authentication, stopped (and its
//! directory removed) when dropped — or, for a server shared by a whole test
//! binary, when the test process exits (a watchdog process).
//!
//! Debian's `postgresql` package provides the binaries
//! (`/usr/lib/postgresql/*/bin`, or `$WHARF_PG_BIN`). `initdb` refuses to
//! run as root, so as root every server command runs as user `postgres`
//! (`runuser`) in a directory owned by it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// A running PostgreSQL server.
#[derive(Debug)]
pub struct PgServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    as_postgres: bool,
    /// Whether commits reach the disk (`fsync`); off for tests.
    durable: bool,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);
static SHARED: OnceLock<Result<PgServer, String>> = OnceLock::new();

/// The directory with `initdb` and `pg_ctl`, if installed.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WHARF_PG_BIN").map(PathBuf::from).filter(|p| p.join("pg_ctl").is_file()) {
        return Some(p);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").is_file() && p.join("pg_ctl").is_file())
        .collect();
    found.sort();
    found.pop()
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().ok().is_some_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

impl PgServer {
    /// One server for the whole test process (each test should use its own
    /// database: [`PgServer::database`]). `Err` is the reason to skip.
    pub fn shared() -> Result<&'static PgServer, String> {
        SHARED.get_or_init(PgServer::start).as_ref().map_err(Clone::clone)
    }

    /// Starts a server of its own (for tests that stop or restart it).
    /// `Err` is the reason to skip (no binaries) or what failed.
    pub fn start() -> Result<PgServer, String> {
        Self::start_with(false)
    }

    /// Like [`start`](Self::start) with `fsync` on and `pg_stat_statements`
    /// loaded (benchmarks of durable commits and of where the database's
    /// time goes).
    pub fn start_durable() -> Result<PgServer, String> {
        Self::start_with(true)
    }

    fn start_with(durable: bool) -> Result<PgServer, String> {
        let bin = bin_dir().ok_or("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)")?;
        let as_postgres = is_root();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("wharf-pg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sock")).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let server = PgServer { bin, dir, port: free_port()?, as_postgres, durable };
        if as_postgres {
            server.sh("chown", &["-R", "postgres:postgres", &server.dir.display().to_string()], false)?;
        }
        let data = server.data().display().to_string();
        server.sh("initdb", &["-D", &data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"], true)?;
        server.watchdog();
        server.pg_start()?;
        Ok(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Runs `prog` (a server binary when `server`), as `postgres` when root.
    fn sh(&self, prog: &str, args: &[&str], server: bool) -> Result<(), String> {
        let path = if server { self.bin.join(prog) } else { PathBuf::from(prog) };
        let mut cmd = if self.as_postgres && server {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let out = cmd
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running {}: {e}", path.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} {} failed: {}{}",
                path.display(),
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Stops the server and removes its directory when this process exits,
    /// however it exits.
    fn watchdog(&self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let stop = if self.as_postgres {
            format!("runuser -u postgres -- '{}' -D '{}' stop -m immediate", pg_ctl.display(), self.data().display())
        } else {
            format!("'{}' -D '{}' stop -m immediate", pg_ctl.display(), self.data().display())
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            dir = self.dir.display()
        );
        let _ = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
    }

    fn pg_start(&self) -> Result<(), String> {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync={} -c max_connections=200{}",
            self.port,
            self.dir.join("sock").display(),
            if self.durable { "on" } else { "off" },
            // Benchmarks read where the database's time goes (`statements`).
            if self.durable { " -c shared_preload_libraries=pg_stat_statements" } else { "" }
        );
        let data = self.data().display().to_string();
        let log = self.dir.join("server.log").display().to_string();
        self.sh("pg_ctl", &["-D", &data, "-l", &log, "-w", "-t", "60", "-o", &opts, "start"], true)
    }

    /// Stops the server (`fast`: clients are disconnected, committed work
    /// kept).
    pub fn stop(&self) -> Result<(), String> {
        let data = self.data().display().to_string();
        self.sh("pg_ctl", &["-D", &data, "-w", "-m", "fast", "stop"], true)
    }

    /// Starts it again on the same port.
    pub fn restart_after_stop(&self) -> Result<(), String> {
        self.pg_start()
    }

    /// The major version (the name of the binaries' parent directory).
    pub fn version(&self) -> String {
        self.bin.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db`.
    pub fn url_of(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// The URL of the default database.
    pub fn url(&self) -> String {
        self.url_of("postgres")
    }

    /// Creates a fresh database (named after a counter) and returns its URL.
    pub fn database(&self) -> Result<String, String> {
        let name = format!("t{}_{}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst));
        let port = self.port.to_string();
        self.sh("createdb", &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", &name], true)?;
        Ok(self.url_of(&name))
    }

    /// Runs `sql` with `psql` against database `db`: its rows, one per
    /// line, fields separated by `|`.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let port = self.port.to_string();
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-d",
                db,
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running psql: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!("psql `{sql}` failed: {}", String::from_utf8_lossy(&out.stderr)))
        }
    }

    /// The server's log (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.data().display().to_string();
        let _ = self.sh("pg_ctl", &["-D", &data, "-m", "immediate", "stop"], true);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `wharf serve` process (a fleet host in tests and benchmarks), killed
/// with `SIGKILL` when dropped.
#[derive(Debug)]
pub struct ServeHost {
    child: Option<std::process::Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its access token.
    pub token: String,
    stderr: PathBuf,
}

impl ServeHost {
    /// Starts `wharf serve --port 0` with `profile` on workspace `ws`, home
    /// `home` (its stderr in `home/NAME.stderr`), plus `extra` arguments;
    /// waits for the URL it prints.
    pub fn start(home: &Path, ws: &Path, profile: &Path, name: &str, extra: &[&str]) -> Result<ServeHost, String> {
        let stderr = home.join(format!("{name}.stderr"));
        let err_file = std::fs::File::create(&stderr).map_err(|e| format!("{}: {e}", stderr.display()))?;
        let mut child = crate::wharf(home)
            .args(["serve", "--port", "0", "--profile"])
            .arg(profile)
            .arg("-w")
            .arg(ws)
            .args(extra)
            .env_remove("WHARF_WEB_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err_file)
            .spawn()
            .map_err(|e| format!("spawning wharf serve: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut lines = std::io::BufReader::new(stdout).lines();
            if let Some(Ok(l)) = lines.next() {
                let _ = tx.send(l);
            }
            for _ in lines {}
        });
        let url = match rx.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "wharf serve ({name}) printed no URL: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                ));
            }
        };
        let rest = url.strip_prefix("http://127.0.0.1:").ok_or_else(|| format!("unexpected first line {url}"))?;
        let (port, token) = rest.split_once("/?token=").ok_or_else(|| format!("no token in {url}"))?;
        let port = port.parse().map_err(|e| format!("{e}: {url}"))?;
        Ok(ServeHost { child: Some(child), port, token: token.to_string(), stderr })
    }

    /// The process id (the lease holder is `HOSTNAME:PID`).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// `kill -9` (and reap).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// An authorized JSON request: `(status, body)` (`Null` when the body is
    /// not JSON); `Err` when the connection failed.
    pub fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(u16, serde_json::Value), String> {
        http_json(self.port, &self.token, method, path, body).map_err(|e| format!("{method} {path}: {e}"))
    }

    /// [`try_call`](Self::try_call), panicking when the connection fails.
    pub fn call(&self, method: &str, path: &str, body: Option<&serde_json::Value>) -> (u16, serde_json::Value) {
        self.try_call(method, path, body).expect("a request to wharf serve")
    }
}

impl Drop for ServeHost {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// One HTTP/1.1 request to 127.0.0.1:`port` with `Connection: close`; the
/// status and the body parsed as JSON.
pub fn http_json(
    port: u16,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> Result<(u16, serde_json::Value), String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(120))).map_err(|e| e.to_string())?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Wharf-Token: {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).and_then(|()| s.write_all(body.as_bytes())).map_err(|e| format!("send: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no HTTP head")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let rest = &raw[split + 4..];
    let status =
        head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| format!("no status in {head:?}"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        let mut out = Vec::new();
        let mut rest = rest;
        while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
            let n = usize::from_str_radix(String::from_utf8_lossy(&rest[..eol]).trim(), 16).unwrap_or(0);
            let after = &rest[eol + 2..];
            if n == 0 || after.len() < n {
                break;
            }
            out.extend_from_slice(&after[..n]);
            rest = after[n..].strip_prefix(b"\r\n").unwrap_or(&after[n..]);
        }
        out
    } else {
        rest.to_vec()
    };
    let body = String::from_utf8_lossy(&body);
    Ok((status, serde_json::from_str(&body).unwrap_or(serde_json::Value::Null)))
}
