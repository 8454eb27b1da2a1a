//! Finding the programs and images a cluster needs.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::qemu::BootFiles;

/// Errors finding what a cluster needs.
#[derive(Debug, thiserror::Error)]
pub enum ToolsError {
    /// A program of ours is not built.
    #[error("{name} not found (looked in {looked}); build it with `cargo build --workspace` or set {env}")]
    Missing {
        /// The program.
        name: String,
        /// Where we looked.
        looked: String,
        /// The environment variable that overrides the lookup.
        env: String,
    },
    /// The images could not be built.
    #[error("building host images failed ({cmd}): {detail}")]
    Images {
        /// The command run.
        cmd: String,
        /// What went wrong.
        detail: String,
    },
}

/// The checkout this crate was built from.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// Directories where cargo put our binaries: beside the running program, or
/// one up from a test binary in `deps/`.
fn bin_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_owned))
    {
        if dir.ends_with("deps") {
            if let Some(up) = dir.parent() {
                dirs.push(up.to_owned());
            }
        }
        dirs.push(dir);
    }
    dirs
}

/// Finds one of our binaries: `$ENV` if set, else beside the running program.
pub fn our_binary(name: &str, env: &str) -> Result<PathBuf, ToolsError> {
    if let Some(p) = std::env::var_os(env) {
        return Ok(PathBuf::from(p));
    }
    let dirs = bin_dirs();
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| ToolsError::Missing {
            name: name.to_owned(),
            looked: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            env: env.to_owned(),
        })
}

/// The images nested guests boot (`vmlinuz`, `guest-initrd.img`):
/// `$DEVLEND_GUEST_IMAGES` if set (under the debug kernel the guests keep
/// Debian's: a KASAN guest under nested KVM in TCG is too slow), else
/// [`images_dir`].
pub fn guest_images_dir() -> Result<PathBuf, ToolsError> {
    match std::env::var_os("DEVLEND_GUEST_IMAGES") {
        Some(p) => Ok(PathBuf::from(p)),
        None => images_dir(),
    }
}

/// The images the peer-to-peer checks' guests boot: a kernel with PCI
/// peer-to-peer DMA, which Debian's kernels lack
/// (`qemu-scripts/build-p2p-guest-kernel.sh`), in `$DEVLEND_P2P_GUEST_IMAGES`,
/// which `test.sh` sets.
pub fn p2p_guest_images_dir() -> Result<PathBuf, ToolsError> {
    match std::env::var_os("DEVLEND_P2P_GUEST_IMAGES") {
        Some(p) => Ok(PathBuf::from(p)),
        None => Err(ToolsError::Images {
            cmd: "qemu-scripts/common.sh devlend_p2p_guest_images".to_owned(),
            detail: "DEVLEND_P2P_GUEST_IMAGES is not set: run the check through ./test.sh, \
                     which builds the peer-to-peer guest kernel and its images"
                .to_owned(),
        }),
    }
}

/// The boot images: `$DEVLEND_IMAGES` if set, else built (or found in the
/// cache) by `guest-images/build.sh`.
pub fn images_dir() -> Result<PathBuf, ToolsError> {
    if let Some(p) = std::env::var_os("DEVLEND_IMAGES") {
        return Ok(PathBuf::from(p));
    }
    let script = repo_root().join("guest-images/build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| ToolsError::Images {
            cmd: script.display().to_string(),
            detail: e.to_string(),
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().last() {
        Some(dir) if out.status.success() && Path::new(dir.trim()).is_dir() => {
            Ok(PathBuf::from(dir.trim()))
        }
        _ => Err(ToolsError::Images {
            cmd: script.display().to_string(),
            detail: format!("{} ({})", out.status, stdout.trim()),
        }),
    }
}

/// Kernel, initramfs and agent for the hosts.
pub fn boot_files() -> Result<BootFiles, ToolsError> {
    let images = images_dir()?;
    Ok(BootFiles {
        kernel: images.join("vmlinuz"),
        initrd: images.join("host-initrd.img"),
        agent: our_binary("devlend-agent", "DEVLEND_AGENT")?,
        // The debug kernel's setup asks for some (qemu-scripts/common.sh).
        append: std::env::var("DEVLEND_HOST_APPEND").unwrap_or_default(),
    })
}
