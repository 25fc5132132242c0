//! Open MPI's messages about a rank that died, which the runtime handles: `ompcluster-run`
//! keeps them from the user (they read as errors of the program), and lets everything else
//! through unchanged, in order.
//!
//! Exactly these, and nothing else (README "Output"):
//! * `[host:pid] PMIX ERROR: BAD-PARAM in file ../../../src/event/pmix_event_notification.c at
//!   line 1033`: PMIx (Open MPI 4.1's runtime) notifying the job that a process ended, once per
//!   surviving process;
//! * `Read -1, expected N, errno = 3`: Open MPI's shared-memory transport trying a single-copy
//!   read from a process that no longer exists (errno 3 is ESRCH);
//! * the boxed `WARNING: Open MPI failed to TCP connect to a peer MPI process` (a peer on another
//!   host that died: its port refuses the connection) and `An MPI communication peer process
//!   has unexpectedly disconnected`, each from its opening rule to its closing one;
//! * `[host][[job,1],rank][.../btl_tcp_frag.c:N:mca_btl_tcp_frag_send] mca_btl_tcp_frag_send:
//!   writev failed: Connection reset by peer (104)`: a send to a peer that died;
//! * `[host:pid] plm:rsh: Warning: setpgid(N,N) failed in parent with errno=Permission
//!   denied(13)`: mpirun starting a daemon on another node through its rsh agent, which had
//!   already exec'd (a race mpirun loses harmlessly);
//! * mpirun's count of those boxes, `[host:pid] N more processes have sent help message
//!   help-mpi-btl-tcp.txt / peer hung up` (or `/ client connect fail`), and the line
//!   `... Set MCA parameter "orte_base_help_aggregate" to 0 ...` right after one.
//!
//! The filter works on whole lines; [`Filter::flush`] hands out a partial line (a prompt with
//! no newline yet) and a rule held back while it cannot yet tell whether a box follows.

/// The first line of the boxes dropped whole.
const BOXES: &[&str] = &[
    "WARNING: Open MPI failed to TCP connect to a peer MPI process",
    "An MPI communication peer process has unexpectedly disconnected.",
];

/// mpirun's count of the boxes above that it did not print.
fn is_box_count(line: &str) -> bool {
    line.starts_with('[')
        && (line.contains(" more process has sent help message help-mpi-btl-tcp.txt / ")
            || line.contains(" more processes have sent help message help-mpi-btl-tcp.txt / "))
        && (line.ends_with("/ peer hung up") || line.ends_with("/ client connect fail"))
}

/// Is `line` (without its newline) one of the single lines dropped?
pub fn is_noise_line(line: &str) -> bool {
    let line = line.trim_end_matches('\r');
    let pmix = line.starts_with('[')
        && line.contains("] PMIX ERROR: BAD-PARAM in file ")
        && line.contains("src/event/pmix_event_notification.c at line ");
    let cma = line
        .strip_prefix("Read -1, expected ")
        .and_then(|r| r.strip_suffix(", errno = 3"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    let reset = line.starts_with('[')
        && line.contains("btl_tcp_frag.c:")
        && line.ends_with("] mca_btl_tcp_frag_send: writev failed: Connection reset by peer (104)");
    let setpgid = line.starts_with('[')
        && line.contains("] plm:rsh: Warning: setpgid(")
        && line.ends_with(") failed in parent with errno=Permission denied(13)");
    pmix || cma || reset || setpgid || is_box_count(line)
}

fn is_rule(line: &str) -> bool {
    let l = line.trim_end();
    l.len() >= 20 && l.bytes().all(|b| b == b'-')
}

/// Where the filter is.
#[derive(Debug, Default, PartialEq, Eq)]
enum State {
    /// Passing lines through.
    #[default]
    Open,
    /// Holding a rule (with its newline): a box may start after it.
    Rule(Vec<u8>),
    /// Inside a dropped box, until its closing rule.
    InBox,
}

/// A line filter over a byte stream.
#[derive(Debug, Default)]
pub struct Filter {
    state: State,
    partial: Vec<u8>,
    /// The last line was mpirun's count of dropped boxes (its hint line follows).
    after_count: bool,
    /// Lines and boxes dropped so far.
    pub dropped: u64,
}

impl Filter {
    /// Feed bytes read from the stream; returns what to write out now.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.partial.extend_from_slice(bytes);
        while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=nl).collect();
            self.line(line, &mut out);
        }
        out
    }

    fn line(&mut self, line: Vec<u8>, out: &mut Vec<u8>) {
        let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
        match std::mem::take(&mut self.state) {
            State::InBox => {
                if !is_rule(&text) {
                    self.state = State::InBox;
                }
            }
            State::Rule(rule) => {
                if BOXES.iter().any(|b| text.starts_with(b)) {
                    self.dropped += 1;
                    self.state = State::InBox;
                } else {
                    out.extend_from_slice(&rule);
                    self.open_line(line, &text, out);
                }
            }
            State::Open => self.open_line(line, &text, out),
        }
    }

    fn open_line(&mut self, line: Vec<u8>, text: &str, out: &mut Vec<u8>) {
        let after_count = std::mem::replace(&mut self.after_count, false);
        if is_rule(text) {
            self.state = State::Rule(line);
        } else if is_noise_line(text) {
            self.dropped += 1;
            self.after_count = is_box_count(text.trim_end_matches('\r'));
        } else if after_count && text.contains("] Set MCA parameter \"orte_base_help_aggregate\" to 0 to see all help / error messages") {
            self.dropped += 1;
        } else {
            out.extend_from_slice(&line);
        }
    }

    /// Nothing more arrived for a while (or the stream ended): what is held back, a partial
    /// line and a rule that no box followed, goes out (a partial line that is noise does not).
    pub fn flush(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if let State::Rule(rule) = std::mem::take(&mut self.state) {
            out.extend_from_slice(&rule);
        } else if self.state == State::InBox {
            return out;
        }
        if !self.partial.is_empty() {
            let p = std::mem::take(&mut self.partial);
            if !is_noise_line(&String::from_utf8_lossy(&p)) {
                out.extend_from_slice(&p);
            }
        }
        out
    }
}

/// Copy `from` to `to` through a [`Filter`] until `from` ends; a partial line or held rule
/// goes out after `idle` without input. Returns how many noise lines and boxes it dropped.
pub fn copy_filtered(from: std::os::fd::RawFd, to: std::os::fd::RawFd, idle: std::time::Duration) -> u64 {
    let mut f = Filter::default();
    let mut buf = vec![0u8; 64 << 10];
    let write = |bytes: &[u8]| event_system::write_all(to, bytes);
    loop {
        let mut pfd = libc::pollfd { fd: from, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, idle.as_millis().min(i32::MAX as u128) as i32) };
        if ready == 0 {
            write(&f.flush());
            continue;
        }
        if ready < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        // SAFETY: reading into a buffer of the stated size.
        let n = unsafe { libc::read(from, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            break;
        }
        write(&f.feed(&buf[..n as usize]));
    }
    write(&f.flush());
    f.dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&str]) -> String {
        let mut f = Filter::default();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(f.feed(c.as_bytes()));
        }
        out.extend(f.flush());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_quoted_lines_are_dropped_and_nothing_else() {
        let pmix = "[vm:24096] PMIX ERROR: BAD-PARAM in file ../../../src/event/pmix_event_notification.c at line 1033\n";
        let cma = "Read -1, expected 262144, errno = 3\n";
        let s = format!("result 1\n{pmix}{cma}{pmix}result 2\n");
        assert_eq!(run(&[&s]), "result 1\nresult 2\n");
        // Near misses stay: another errno, another PMIx error, the program's own words.
        let keep = "Read -1, expected 12, errno = 14\n[vm:1] PMIX ERROR: UNREACHABLE in file x.c at line 3\nPMIX ERROR: BAD-PARAM is what I print\n";
        assert_eq!(run(&[keep]), keep);
    }

    #[test]
    fn lines_split_across_reads_are_judged_whole() {
        assert_eq!(run(&["a\n[h:1] PMIX ERROR: BAD-PA", "RAM in file ../src/event/pmix_event_notification.c at line 1033\nb"]), "a\nb");
    }

    #[test]
    fn the_tcp_connect_box_is_dropped_whole_and_other_boxes_stay() {
        let rule = "-".repeat(74);
        let tcp = format!(
            "{rule}\nWARNING: Open MPI failed to TCP connect to a peer MPI process.  This\nshould not happen.\n\nYour Open MPI job may now hang or fail.\n\n  Local host: node1\n  PID:        4242\n  Message:    connect() to 10.77.0.3:1024 failed\n  Error:      Connection refused (111)\n{rule}\n"
        );
        let other = format!("{rule}\nmpirun noticed that process rank 2 with PID 0 on node node2 exited on signal 9 (Killed).\n{rule}\n");
        assert_eq!(run(&[&format!("before\n{tcp}after\n{other}")]), format!("before\nafter\n{other}"));
        // A rule the program prints, then nothing: it comes out at the flush.
        assert_eq!(run(&[&format!("{rule}\n")]), format!("{rule}\n"));
    }

    #[test]
    fn what_a_peer_on_another_host_dying_prints_is_dropped() {
        let rule = "-".repeat(74);
        let hung = format!("{rule}\nAn MPI communication peer process has unexpectedly disconnected.  This\nusually indicates a failure in the peer process.\n\n  Local host: node1\n  Peer host:  10.77.0.13\n{rule}\n");
        let setpgid = "[vm:16057] plm:rsh: Warning: setpgid(16064,16064) failed in parent with errno=Permission denied(13)\n";
        assert_eq!(run(&[&format!("x\n{setpgid}y\n")]), "x\ny\n");
        let reset = "[node4][[8449,1],3][../../../../../../opal/mca/btl/tcp/btl_tcp_frag.c:135:mca_btl_tcp_frag_send] mca_btl_tcp_frag_send: writev failed: Connection reset by peer (104)\n";
        let counts = "[vm:19967] 2 more processes have sent help message help-mpi-btl-tcp.txt / peer hung up\n[vm:19967] Set MCA parameter \"orte_base_help_aggregate\" to 0 to see all help / error messages\n[vm:19967] 1 more process has sent help message help-mpi-btl-tcp.txt / client connect fail\n";
        assert_eq!(run(&[&format!("a\n{hung}{reset}b\n{counts}c\n")]), "a\nb\nc\n");
        // The hint alone (after another message of Open MPI's) stays.
        let hint = "[vm:1] Set MCA parameter \"orte_base_help_aggregate\" to 0 to see all help / error messages\n";
        assert_eq!(run(&[&format!("[vm:1] 3 more processes have sent help message help-orte-odls.txt / x\n{hint}")]), format!("[vm:1] 3 more processes have sent help message help-orte-odls.txt / x\n{hint}"));
    }

    #[test]
    fn a_partial_line_comes_out_at_a_flush() {
        let mut f = Filter::default();
        assert!(f.feed(b"Enter a number: ").is_empty());
        assert_eq!(f.flush(), b"Enter a number: ");
        assert_eq!(f.feed(b"x\n"), b"x\n");
    }
}
