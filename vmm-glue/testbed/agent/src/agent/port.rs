//! Finding and opening the agent's virtio-serial port.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use log::{info, warn};

/// Pause between looks for the port while it has not appeared.
const RETRY: Duration = Duration::from_millis(200);

/// The device node of the virtio-serial port named `name`: scans
/// `<sysfs>/class/virtio-ports/*/name` and returns `<dev>/<entry>`.
pub fn find_port(sysfs: &Path, dev: &Path, name: &str) -> io::Result<Option<PathBuf>> {
    let class = sysfs.join("class/virtio-ports");
    let entries = match fs::read_dir(&class) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        // Ports without a name attribute, or unreadable ones, are not ours.
        let Ok(port_name) = fs::read_to_string(entry.path().join("name")) else {
            continue;
        };
        if port_name.trim_end() == name {
            found.push(entry.file_name());
        }
    }
    found.sort();
    Ok(found.first().map(|f| dev.join(f)))
}

/// Waits until the port named `name` exists and opens it.
pub fn wait_for_port(name: &str) -> (PathBuf, File) {
    let mut logged = false;
    loop {
        let result = find_port(Path::new("/sys"), Path::new("/dev"), name).and_then(|found| {
            found
                .map(|path| open_port(&path).map(|f| (path, f)))
                .transpose()
        });
        match result {
            Ok(Some(port)) => return port,
            Ok(None) if !logged => info!("waiting for virtio-serial port {name}"),
            Err(e) if !logged => warn!("looking for virtio-serial port {name}: {e}; retrying"),
            _ => {}
        }
        logged = true;
        thread::sleep(RETRY);
    }
}

/// Opens the port for reading and writing. A terminal (a pty in tests, an
/// hvc console) is put in raw mode so lines pass unaltered and unlimited.
pub fn open_port(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(path)?;
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is an open descriptor owned by `file`; isatty only queries it.
    if unsafe { libc::isatty(fd) } == 1 {
        // SAFETY: termios is plain old data; all-zero is a valid value that
        // tcgetattr overwrites.
        let mut tio: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `tio` is a valid, writable termios.
        if unsafe { libc::tcgetattr(fd, &mut tio) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `tio` is a valid termios initialized by tcgetattr.
        unsafe { libc::cfmakeraw(&mut tio) };
        // SAFETY: `fd` is open and `tio` is a valid termios.
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &tio) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_named_port_in_a_fake_sysfs() {
        let root = tempfile::tempdir().unwrap();
        let sys = root.path().join("sys");
        let dev = root.path().join("dev");
        assert_eq!(find_port(&sys, &dev, "org.devlend.agent").unwrap(), None);
        for (port, name) in [
            ("vport0p0", None),
            ("vport1p1", Some("org.qemu.guest_agent.0\n")),
            ("vport1p2", Some("org.devlend.agent\n")),
        ] {
            let dir = sys.join("class/virtio-ports").join(port);
            fs::create_dir_all(&dir).unwrap();
            if let Some(name) = name {
                fs::write(dir.join("name"), name).unwrap();
            }
        }
        assert_eq!(
            find_port(&sys, &dev, "org.devlend.agent").unwrap(),
            Some(dev.join("vport1p2"))
        );
        assert_eq!(find_port(&sys, &dev, "org.devlend.other").unwrap(), None);
    }

    #[test]
    fn open_port_reports_missing_nodes() {
        let err = open_port(Path::new("/nonexistent/vport9p9")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
