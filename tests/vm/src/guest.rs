//! Nested KVM guests inside a host: the guest initramfs runs one command
//! given on its kernel command line and prints its output between markers.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use devlend_agent::AgentClient;

use crate::fabric;

/// What a guest printed.
#[derive(Debug)]
pub struct GuestRun {
    /// The whole console.
    pub console: String,
    /// The command's output (between the markers).
    pub output: String,
    /// The command's exit status.
    pub rc: i32,
    /// Wall time from QEMU start to its exit.
    pub elapsed: Duration,
}

/// How to start a nested guest.
#[derive(Debug, Clone)]
pub struct GuestOpts<'a> {
    /// Guest RAM in MiB.
    pub mem_mib: u32,
    /// More QEMU arguments (e.g. a vfio-pci device).
    pub extra_qemu_args: &'a str,
    /// A QMP socket path inside the host, for hot-plug.
    pub qmp: Option<&'a str>,
    /// More guest kernel parameters, before devlend's own (no quotes).
    pub kernel_args: &'a str,
}

impl Default for GuestOpts<'_> {
    fn default() -> Self {
        GuestOpts {
            mem_mib: 256,
            extra_qemu_args: "",
            qmp: None,
            kernel_args: "",
        }
    }
}

/// How long a guest's init waits for its NVMe namespaces (guest-init.sh's
/// `devlend.nvme_wait`): `DEVLEND_GUEST_NVME_WAIT` seconds when set (the
/// debug kernel's runs, where pinning a guest's memory takes a minute),
/// else the init's own 10 s.
fn nvme_wait() -> String {
    std::env::var("DEVLEND_GUEST_NVME_WAIT")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map(|s| format!("devlend.nvme_wait={s} "))
        .unwrap_or_default()
}

/// `DEVLEND_GUEST_APPEND`: more kernel parameters for every guest, for
/// a look at one that hangs (`loglevel=8` undoes `quiet`).
fn extra_append() -> String {
    std::env::var("DEVLEND_GUEST_APPEND")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| format!("{} ", v.trim()))
        .unwrap_or_default()
}

/// Bytes Linux keeps of a kernel command line (x86 `COMMAND_LINE_SIZE`,
/// less its NUL): a longer one hangs the guest's kernel before it prints.
pub const KERNEL_CMDLINE_MAX: usize = 2047;

/// The guest kernel's command line for `cmd`: `devlend.cmd=<base64>`, or
/// when that does not fit, `devlend.cmdz=<base64 of gzip>`; an error when
/// neither fits.
pub fn kernel_cmdline(cmd: &str) -> anyhow::Result<String> {
    kernel_cmdline_with(cmd, "")
}

/// [`kernel_cmdline`] with more kernel parameters `args` (no quotes).
pub fn kernel_cmdline_with(cmd: &str, args: &str) -> anyhow::Result<String> {
    ensure!(
        !args.contains('\''),
        "guest kernel parameters with a quote: {args}"
    );
    let args = if args.trim().is_empty() {
        String::new()
    } else {
        format!("{} ", args.trim())
    };
    let head = format!(
        "console=ttyS0 quiet panic=-1 {args}{}{}",
        nvme_wait(),
        extra_append()
    );
    let plain = format!("{head}devlend.cmd={}", base64(cmd.as_bytes()));
    if plain.len() <= KERNEL_CMDLINE_MAX {
        return Ok(plain);
    }
    let zipped = format!("{head}devlend.cmdz={}", base64(&gzip(cmd.as_bytes())?));
    anyhow::ensure!(
        zipped.len() <= KERNEL_CMDLINE_MAX,
        "the guest's command ({} bytes) does not fit its kernel command line even gzipped ({} > {KERNEL_CMDLINE_MAX} bytes)",
        cmd.len(),
        zipped.len()
    );
    Ok(zipped)
}

/// `gzip -9n` of `data` (run on this machine).
fn gzip(data: &[u8]) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("gzip")
        .arg("-9n")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("gzip")?;
    child
        .stdin
        .take()
        .context("gzip's stdin")?
        .write_all(data)?;
    let out = child.wait_with_output().context("gzip")?;
    anyhow::ensure!(out.status.success(), "gzip failed: {:?}", out.status);
    Ok(out.stdout)
}

/// The `-name` of every guest QEMU the checks start: how
/// [`kill_leftovers`] tells them from anything else running on a host.
const GUEST_QEMU_NAME: &str = "devlend-check-guest";

/// Kills every guest a check started on the host and left running (a
/// check that failed before its clean-up):
/// each by its PID, found by the guests' `-name`. Returns how many.
pub fn kill_leftovers(agent: &AgentClient) -> anyhow::Result<usize> {
    // One grep over every process's command line (a loop forking per
    // process takes seconds under TCG); the bracket keeps the grep and
    // its shell, whose command lines hold the pattern, from matching.
    let out = fabric::sh(
        agent,
        &format!(
            "grep -ls -- '{}[{}]' /proc/[0-9]*/cmdline; true",
            &GUEST_QEMU_NAME[..GUEST_QEMU_NAME.len() - 1],
            &GUEST_QEMU_NAME[GUEST_QEMU_NAME.len() - 1..],
        ),
    )?;
    let pids: Vec<u32> = out
        .lines()
        .filter_map(|l| {
            l.strip_prefix("/proc/")?
                .strip_suffix("/cmdline")?
                .parse()
                .ok()
        })
        .collect();
    for pid in &pids {
        kill_pid(agent, *pid)?;
    }
    Ok(pids.len())
}

/// How to read a guest QEMU's end from its console: every guest runs with
/// `-trace runstate_set`, so QEMU prints its run state changes there.
const QEMU_EXIT_HINT: &str = "QEMU's run states are in its console: a last change to \
     shutdown is a guest that powered off or reset (with no panic printed, a triple fault); \
     none is a QEMU that was killed";

/// The QEMU command line of a nested guest running `cmd`. With
/// `bios_log`, SeaBIOS's debug output (port 0x402) goes to that file in
/// the host: where a guest that never reaches Linux stopped.
fn qemu_cmdline(
    images: &Path,
    cmd: &str,
    opts: &GuestOpts<'_>,
    bios_log: Option<&str>,
) -> anyhow::Result<String> {
    let qmp = opts
        .qmp
        .map(|s| format!("-qmp unix:{s},server=on,wait=off"))
        .unwrap_or_default();
    let bios = bios_log
        .map(|f| {
            format!(
                "-chardev file,id=biosdbg,path={f} -device isa-debugcon,iobase=0x402,chardev=biosdbg"
            )
        })
        .unwrap_or_default();
    Ok(format!(
        "qemu-system-x86_64 -name {GUEST_QEMU_NAME} -accel kvm -cpu host -m {mem} -smp 1 -nodefaults \
         -display none -no-reboot -serial stdio -trace runstate_set {qmp} {bios} \
         -kernel {img}/vmlinuz -initrd {img}/guest-initrd.img \
         -append '{append}' {extra}",
        mem = opts.mem_mib,
        img = devlend_cluster::host_view(images).display(),
        append = kernel_cmdline_with(cmd, opts.kernel_args)?,
        extra = opts.extra_qemu_args,
    ))
}

/// Boots a KVM guest in a host (whose `/dev/kvm` must exist) with the guest
/// images in `images`, runs `cmd` in it and returns what it printed.
pub fn run(
    agent: &AgentClient,
    images: &Path,
    cmd: &str,
    extra_qemu_args: &str,
) -> anyhow::Result<GuestRun> {
    run_with(
        agent,
        images,
        cmd,
        &GuestOpts {
            extra_qemu_args,
            ..GuestOpts::default()
        },
    )
}

/// [`run`] with options.
pub fn run_with(
    agent: &AgentClient,
    images: &Path,
    cmd: &str,
    opts: &GuestOpts<'_>,
) -> anyhow::Result<GuestRun> {
    let t0 = Instant::now();
    let console = fabric::sh_timeout(
        agent,
        &format!("timeout 300 {}", qemu_cmdline(images, cmd, opts, None)?),
        Duration::from_secs(320),
    )?;
    parse_console(console, t0.elapsed())
}

pub(crate) fn parse_console(console: String, elapsed: Duration) -> anyhow::Result<GuestRun> {
    let begin = console
        .find("DEVLEND-CMD-BEGIN")
        .with_context(|| format!("guest never ran its command; console:\n{console}"))?;
    let rest = &console[begin + "DEVLEND-CMD-BEGIN".len()..];
    let end = rest
        .find("DEVLEND-CMD-END rc=")
        .with_context(|| format!("guest command did not finish; console:\n{console}"))?;
    let rc = rest[end + "DEVLEND-CMD-END rc=".len()..]
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no exit status in console:\n{console}"))?;
    Ok(GuestRun {
        output: rest[..end].trim_matches(['\r', '\n']).to_owned(),
        console,
        rc,
        elapsed,
    })
}

/// A guest running in the background in a host.
#[derive(Debug)]
pub struct BackgroundGuest {
    /// PID of its QEMU, in the host.
    pub pid: u32,
    /// Its console (QEMU's stdout and stderr), a file in the host.
    pub console: String,
    started: Instant,
}

/// Starts a guest in the background: QEMU's output goes to `console` (a
/// path in the host's tmpfs); returns at once.
pub fn spawn(
    agent: &AgentClient,
    images: &Path,
    cmd: &str,
    opts: &GuestOpts<'_>,
    console: &str,
) -> anyhow::Result<BackgroundGuest> {
    let out = fabric::sh(
        agent,
        &format!(
            "setsid {} </dev/null >{console} 2>&1 & echo $!",
            qemu_cmdline(images, cmd, opts, Some(&format!("{console}.bios")))?
        ),
    )?;
    Ok(BackgroundGuest {
        pid: out
            .trim()
            .parse()
            .with_context(|| format!("no pid: {out:?}"))?,
        console: console.to_owned(),
        started: Instant::now(),
    })
}

impl BackgroundGuest {
    /// What the guest printed so far.
    pub fn console(&self, agent: &AgentClient) -> anyhow::Result<String> {
        fabric::sh(agent, &format!("cat {}", self.console))
    }

    /// The end of SeaBIOS's debug output.
    pub fn bios_log(&self, agent: &AgentClient) -> anyhow::Result<String> {
        fabric::sh(
            agent,
            &format!("tail -c 4000 {}.bios 2>/dev/null || true", self.console),
        )
    }

    /// True while its QEMU runs.
    pub fn running(&self, agent: &AgentClient) -> anyhow::Result<bool> {
        Ok(agent
            .sh(&format!("kill -0 {}", self.pid), Duration::from_secs(30))?
            .exit_code
            == Some(0))
    }

    /// Waits until the console contains `needle`; the console.
    pub fn wait_for(
        &self,
        agent: &AgentClient,
        needle: &str,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        let t0 = Instant::now();
        loop {
            let c = self.console(agent)?;
            if c.contains(needle) {
                return Ok(c);
            }
            let running = self.running(agent)?;
            if t0.elapsed() > timeout || !running {
                // Nothing from Linux's init: say where the firmware was.
                let bios = if c.contains("devlend-init") {
                    String::new()
                } else {
                    format!("\nend of SeaBIOS's log:\n{}", self.bios_log(agent)?)
                };
                let why = if running {
                    format!("within {timeout:?}")
                } else {
                    format!(
                        "before its QEMU exited, {:.1} s after it started ({QEMU_EXIT_HINT})",
                        self.started.elapsed().as_secs_f64()
                    )
                };
                anyhow::bail!("guest did not print {needle:?} {why}; console:\n{c}{bios}");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Waits for the guest to power off; what it printed.
    pub fn wait(&self, agent: &AgentClient, timeout: Duration) -> anyhow::Result<GuestRun> {
        let t0 = Instant::now();
        while self.running(agent)? {
            if t0.elapsed() > timeout {
                anyhow::bail!(
                    "guest still running after {timeout:?}:\n{}",
                    self.console(agent)?
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        parse_console(self.console(agent)?, self.started.elapsed())
    }

    /// Kills its QEMU (by its PID) and waits for it to go.
    pub fn kill(&self, agent: &AgentClient) -> anyhow::Result<()> {
        kill_pid(agent, self.pid)
    }
}

/// Standard base64 (RFC 4648, with padding), for the kernel command line.
pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(T[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Kills the QEMU of a [`BackgroundGuest`] by its PID and waits for it to
/// go: what a [`crate::Scope`] that outlives the guest value runs.
pub fn kill_pid(agent: &AgentClient, pid: u32) -> anyhow::Result<()> {
    fabric::sh(
        agent,
        &format!(
            "kill -9 {pid} 2>/dev/null; for i in $(seq 100); do kill -0 {pid} 2>/dev/null || exit 0; sleep 0.1; done; exit 1"
        ),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_command_is_gzipped_and_one_too_long_refused() {
        let short = super::kernel_cmdline("echo hi").unwrap();
        assert!(short.contains("devlend.cmd=ZWNobyBoaQ=="), "{short}");
        // A real script of 2 KiB: too long as plain base64, fits gzipped.
        let script =
            "for d in /sys/bus/pci/devices/*; do echo \"$(cat $d/vendor)\"; done\n".repeat(30);
        let long = super::kernel_cmdline(&script).unwrap();
        assert!(long.contains("devlend.cmdz="), "{long}");
        assert!(long.len() <= super::KERNEL_CMDLINE_MAX);
        // Random bytes do not compress.
        let noise: String = (0..3000)
            .map(|_| char::from(b'!' + rand::random::<u8>() % 90))
            .collect();
        assert!(super::kernel_cmdline(&noise).is_err());
    }

    #[test]
    fn base64_matches_rfc4648() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(super::base64(i.as_bytes()), o);
        }
    }
}
