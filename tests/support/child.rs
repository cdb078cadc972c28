//! One guard for every process a test starts (`#[path]`-included by the test binaries that
//! run processes).
//!
//! - [`command`] makes a [`Command`] that cannot outlive the test: on Linux the child asks the
//!   kernel for SIGKILL when the thread that started it ends (`PR_SET_PDEATHSIG`), so a test
//!   binary killed with SIGKILL, or a test thread that panicked past its guards, takes its
//!   schedulers, executors and clients with it. Start children from the test's own thread:
//!   a child started by a helper thread dies when that thread ends.
//! - [`Child::spawn`] runs it with standard output and error going to files (a pipe nobody
//!   reads blocks the child once full), in a directory under the cargo target's tmp dir that
//!   is removed with the guard. Dropping the guard kills the child and reaps it; during a
//!   panic it also prints the tail of the child's standard error.
//! - [`Child::wait`] / [`output`] wait for the child until its deadline; past it the child is
//!   killed and the test fails with the tail of its standard error.
//!
//! Deadlines are hang guards, not speed checks: they are many times what a run takes here.
#![allow(dead_code)] // each including binary uses part of it

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// The deadline of a command run to completion unless told otherwise: ten minutes, for
/// commands that take seconds here.
pub const TIMEOUT: Duration = Duration::from_secs(600);

/// How much of a child's standard error a failure shows.
const TAIL_LINES: usize = 40;

/// A directory for a test's files under the cargo target's tmp dir, removed when dropped.
/// A test binary killed before it drops the guard leaves it there, not in the system's temp
/// directory.
pub fn scratch_dir(prefix: &str) -> tempfile::TempDir {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(root).unwrap();
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(root)
        .unwrap()
}

/// `program` with standard input closed, which dies with the thread that spawns it (Linux).
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    command.stdin(Stdio::null());
    die_with_parent(&mut command);
    command
}

/// The `calibsql` binary in `dir`, with `dir` as a private `HOME` (no user configuration or
/// history is read or written), as [`command`].
pub fn calibsql(dir: &Path) -> Command {
    let mut command = command(env!("CARGO_BIN_EXE_calibsql"));
    command.current_dir(dir).env("HOME", dir);
    command
}

#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the hook runs in the forked child before exec and calls only prctl, getppid
    // and raise, which are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody will signal.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_: &mut Command) {}

/// A running child process; killed and reaped when dropped.
pub struct Child {
    name: String,
    child: std::process::Child,
    files: tempfile::TempDir,
    started: Instant,
    deadline: Option<Duration>,
    status: Option<ExitStatus>,
    /// Whether a failure already showed its standard error.
    reported: bool,
}

impl Child {
    /// Starts `command` (best made with [`command`]) as `name`, its standard output and
    /// error into files. With a `deadline`, [`Child::wait`] fails the test once the child has
    /// run that long; without one, the child runs until it exits, is killed or dropped.
    pub fn spawn(name: &str, command: &mut Command, deadline: Option<Duration>) -> Child {
        let files = scratch_dir("child-");
        let stdout = std::fs::File::create(files.path().join("stdout")).unwrap();
        let stderr = std::fs::File::create(files.path().join("stderr")).unwrap();
        let child = command
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({command:?}): {e}"));
        Child {
            name: name.to_string(),
            child,
            files,
            started: Instant::now(),
            deadline,
            status: None,
            reported: false,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// How long the child has run.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn path(&self, stream: &str) -> PathBuf {
        self.files.path().join(stream)
    }

    /// What the child wrote on standard output so far.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(self.path("stdout")).unwrap_or_default()).into()
    }

    /// What the child wrote on standard error so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(self.path("stderr")).unwrap_or_default()).into()
    }

    /// The last lines of [`Child::stderr`].
    pub fn stderr_tail(&self) -> String {
        let stderr = self.stderr();
        let lines: Vec<&str> = stderr.lines().collect();
        let skipped = lines.len().saturating_sub(TAIL_LINES);
        let mut tail = lines[skipped..].join("\n");
        if skipped > 0 {
            tail = format!("[… {skipped} lines]\n{tail}");
        }
        tail
    }

    /// The exit status, if the child has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().unwrap();
        }
        self.status
    }

    /// Kills the child (if it still runs) and reaps it.
    pub fn kill(&mut self) {
        if self.try_wait().is_none() {
            let _ = self.child.kill();
            self.status = Some(self.child.wait().unwrap());
        }
    }

    /// Sets the deadline to `from_now` from now (e.g. from the moment the test has done
    /// something the child then has to react to).
    pub fn deadline_in(&mut self, from_now: Duration) {
        self.deadline = Some(self.started.elapsed() + from_now);
    }

    /// Fails the test, after killing the child, when it has run past its deadline.
    pub fn check_deadline(&mut self) {
        if let Some(deadline) = self.deadline {
            if self.started.elapsed() > deadline && self.try_wait().is_none() {
                self.kill();
                self.reported = true;
                panic!(
                    "{} did not finish within {deadline:?}, killed; its standard error ends with:\n{}",
                    self.name,
                    self.stderr_tail()
                );
            }
        }
    }

    /// Waits for the child to exit, at most until its deadline.
    pub fn wait(&mut self) -> ExitStatus {
        let mut pause = Duration::from_millis(5);
        loop {
            if let Some(status) = self.try_wait() {
                return status;
            }
            self.check_deadline();
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// Waits as [`Child::wait`] and returns the status and what the child wrote.
    pub fn output(mut self) -> Output {
        let status = self.wait();
        Output {
            status,
            stdout: std::fs::read(self.path("stdout")).unwrap_or_default(),
            stderr: std::fs::read(self.path("stderr")).unwrap_or_default(),
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let running = self.try_wait().is_none();
        self.kill();
        if std::thread::panicking() && !self.reported {
            let state = if running { "killed" } else { "had exited" };
            eprintln!(
                "--- {} ({state}), its standard error:\n{}",
                self.name,
                self.stderr_tail()
            );
        }
    }
}

/// Runs `command` (best made with [`command`]) to completion as `name`, at most `timeout`.
pub fn output(name: &str, command: &mut Command, timeout: Duration) -> Output {
    Child::spawn(name, command, Some(timeout)).output()
}

/// A 127.0.0.1 port on which connections are refused for as long as it is kept: a socket
/// bound to it that never listens, so no other process can take the port meanwhile (a port
/// bound and released at once can be taken by anything before it is used).
#[cfg(unix)]
pub struct ClosedPort {
    _socket: std::os::fd::OwnedFd,
    pub port: u16,
}

#[cfg(unix)]
pub fn closed_port() -> ClosedPort {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: plain socket calls on a descriptor owned from creation on; the address
    // structures are zeroed and sized as the calls expect.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let socket = OwnedFd::from_raw_fd(fd);
        let mut address: libc::sockaddr_in = std::mem::zeroed();
        address.sin_family = libc::AF_INET as libc::sa_family_t;
        address.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        address.sin_port = 0;
        let size = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let bound = libc::bind(fd, (&raw const address).cast(), size);
        assert!(bound == 0, "bind: {}", std::io::Error::last_os_error());
        let mut length = size;
        let named = libc::getsockname(fd, (&raw mut address).cast(), &mut length);
        assert!(
            named == 0,
            "getsockname: {}",
            std::io::Error::last_os_error()
        );
        ClosedPort {
            _socket: socket,
            port: u16::from_be(address.sin_port),
        }
    }
}

/// Whether process `pid` has a socket listening on 127.0.0.1:`port` (Linux: its
/// `/proc/PID/net/tcp` and file descriptors), so a port another process took in the meantime
/// is not mistaken for the child's.
#[cfg(target_os = "linux")]
pub fn listens_on(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")) else {
        return false;
    };
    // local_address is hex IP:port (IP in host byte order on x86: 0100007F); st 0A = LISTEN.
    let wanted = format!(":{port:04X}");
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() > 9 && fields[1].ends_with(&wanted) && fields[3] == "0A")
                .then(|| format!("socket:[{}]", fields[9]))
        })
        .collect();
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            inodes
                .iter()
                .any(|inode| target.as_os_str() == inode.as_str())
        })
    })
}

/// Whether something listens on 127.0.0.1:`port` (not necessarily process `pid`).
#[cfg(not(target_os = "linux"))]
pub fn listens_on(_pid: u32, port: u16) -> bool {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok()
}

/// A 127.0.0.1 port that was free a moment ago: bound and released, so another process may
/// take it before it is used (a server started on it then fails, and the test says so).
#[allow(dead_code)] // not every test binary that includes this file starts servers
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether process `pid` has a handler for SIGINT installed (bit 2 of `SigCgt` in its
/// `/proc/PID/status`): from then on a SIGINT reaches its handler, whatever disposition the
/// process inherited (a script's `cmd &` starts it with SIGINT ignored, and a SIGINT before
/// the handler is lost).
#[cfg(target_os = "linux")]
#[allow(dead_code)] // not every test binary that includes this file signals its children
pub fn catches_sigint(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
}
