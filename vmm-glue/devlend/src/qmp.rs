//! A small QMP client: enough for device_add and device_del with its
//! DEVICE_DELETED event.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::error::{CliError, Result};

/// A QMP session in command mode.
#[derive(Debug)]
pub struct Qmp {
    socket: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    line: String,
    events: VecDeque<Value>,
    next_id: u64,
}

fn hint_for(desc: &str) -> String {
    let d = desc.to_ascii_lowercase();
    if d.contains("duplicate") || d.contains("already exists") {
        "choose another --id".into()
    } else if d.contains("hotplug") || d.contains("hot-plug") || d.contains("bus") {
        "give --bus a free hot-pluggable bus, e.g. an empty pcie-root-port the VM was started with (-device pcie-root-port,id=rp1,chassis=1)".into()
    } else if d.contains("not found") {
        "`info qtree` in the QEMU monitor shows the device ids".into()
    } else if d.contains("sysfsdev")
        || d.contains("vfio")
        || d.contains("busy")
        || d.contains("group")
    {
        "is the mdev on this host (`devlend mdev list`) and free (not open in another VM)? `dmesg` on this host says more".into()
    } else {
        String::new()
    }
}

impl Qmp {
    /// Connects, reads the greeting and enters command mode.
    pub fn connect(socket: &Path, timeout: Duration) -> Result<Self> {
        let stream = UnixStream::connect(socket).map_err(|e| {
            CliError::vmm(
                format!("cannot connect to QMP socket {}: {e}", socket.display()),
                "start QEMU with -qmp unix:<path>,server=on,wait=off and pass that path; a QMP socket serves one client at a time",
            )
        })?;
        let writer = stream
            .try_clone()
            .map_err(|e| CliError::vmm(format!("QMP socket {}: {e}", socket.display()), ""))?;
        let mut q = Qmp {
            socket: socket.to_path_buf(),
            reader: BufReader::new(stream),
            writer,
            line: String::new(),
            events: VecDeque::new(),
            next_id: 1,
        };
        let deadline = Instant::now() + timeout;
        let greeting = q.read_msg(deadline)?.ok_or_else(|| {
            CliError::vmm(
                format!("no QMP greeting on {} within {timeout:?}", socket.display()),
                "is this a QMP socket (not the HMP monitor or a serial port)?",
            )
        })?;
        if greeting.get("QMP").is_none() {
            return Err(CliError::vmm(
                format!("{} did not greet like QMP: {greeting}", socket.display()),
                "",
            ));
        }
        q.execute("qmp_capabilities", None, timeout)?;
        Ok(q)
    }

    fn proto_err(&self, what: impl std::fmt::Display) -> CliError {
        CliError::vmm(format!("QMP on {}: {what}", self.socket.display()), "")
    }

    /// Reads one message, or None at the deadline.
    fn read_msg(&mut self, deadline: Instant) -> Result<Option<Value>> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.reader
                .get_ref()
                .set_read_timeout(Some(left))
                .map_err(|e| self.proto_err(e))?;
            match self.reader.read_line(&mut self.line) {
                Ok(0) => return Err(self.proto_err("QEMU closed the connection")),
                Ok(_) if self.line.ends_with('\n') => {
                    let line = std::mem::take(&mut self.line);
                    if line.trim().is_empty() {
                        continue;
                    }
                    return serde_json::from_str(&line)
                        .map(Some)
                        .map_err(|e| self.proto_err(format!("bad JSON {line:?}: {e}")));
                }
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(self.proto_err(e)),
            }
        }
    }

    /// Runs a command; returns its `return` value or QEMU's error.
    pub fn execute(&mut self, cmd: &str, args: Option<Value>, timeout: Duration) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({ "execute": cmd, "id": id });
        if let Some(a) = args {
            msg["arguments"] = a;
        }
        let mut text = msg.to_string();
        text.push('\n');
        self.writer
            .write_all(text.as_bytes())
            .map_err(|e| self.proto_err(format!("sending {cmd}: {e}")))?;
        let deadline = Instant::now() + timeout;
        loop {
            let Some(m) = self.read_msg(deadline)? else {
                return Err(CliError::Timeout {
                    msg: format!("QEMU did not answer {cmd} within {timeout:?}"),
                    hint: "is the VM paused in a blocking operation? try again".into(),
                });
            };
            if m.get("event").is_some() {
                self.events.push_back(m);
                continue;
            }
            if m.get("id").and_then(Value::as_u64) != Some(id) {
                continue;
            }
            if let Some(r) = m.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = m.get("error") {
                let class = e.get("class").and_then(Value::as_str).unwrap_or("?");
                let desc = e.get("desc").and_then(Value::as_str).unwrap_or("?");
                return Err(CliError::vmm(
                    format!("QEMU refused {cmd}: {desc} ({class})"),
                    hint_for(desc),
                ));
            }
        }
    }

    /// Waits for an event for which `pred` holds; None at the timeout.
    pub fn wait_event(
        &mut self,
        name: &str,
        pred: impl Fn(&Value) -> bool,
        timeout: Duration,
    ) -> Result<Option<Value>> {
        let matches = |m: &Value| {
            m.get("event").and_then(Value::as_str) == Some(name)
                && pred(m.get("data").unwrap_or(&Value::Null))
        };
        if let Some(pos) = self.events.iter().position(matches) {
            return Ok(self.events.remove(pos));
        }
        let deadline = Instant::now() + timeout;
        while let Some(m) = self.read_msg(deadline)? {
            if matches(&m) {
                return Ok(Some(m));
            }
        }
        Ok(None)
    }
}

/// Hot-plugs the mdev into the running VM.
pub fn device_add(
    q: &mut Qmp,
    sysfsdev: &str,
    id: &str,
    bus: Option<&str>,
    timeout: Duration,
) -> Result<()> {
    let mut args = json!({ "driver": "vfio-pci", "sysfsdev": sysfsdev, "id": id });
    if let Some(b) = bus {
        args["bus"] = json!(b);
    }
    q.execute("device_add", Some(args), timeout).map(|_| ())
}

/// Asks the guest to release a device and waits for QEMU's DEVICE_DELETED.
/// A request still pending from an earlier call ("already in the process of
/// unplug") is waited for again rather than reported as a refusal.
pub fn device_del(q: &mut Qmp, id: &str, timeout: Duration) -> Result<()> {
    match q.execute("device_del", Some(json!({ "id": id })), timeout) {
        Ok(_) => {}
        Err(CliError::Vmm { msg, .. }) if msg.contains("in the process of unplug") => {}
        Err(e) => return Err(e),
    }
    let ev = q.wait_event(
        "DEVICE_DELETED",
        |d| d.get("device").and_then(Value::as_str) == Some(id),
        timeout,
    )?;
    match ev {
        Some(_) => Ok(()),
        None => Err(CliError::Timeout {
            msg: format!(
                "the guest did not release device {id} within {} s (no DEVICE_DELETED)",
                timeout.as_secs()
            ),
            hint: "unplugging needs the guest's cooperation: check that it runs PCIe hot-plug (pciehp, or acpiphp) and is not hung. The device is still attached and the request stays pending; wait and run `devlend detach` again, use a longer --timeout, or stop the VM".into(),
        }),
    }
}
