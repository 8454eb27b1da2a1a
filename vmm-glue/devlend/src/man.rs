//! Manual pages from the command-line definition itself (`devlend man
//! DIR`, run when the Debian package is built), so they never drift from
//! `--help`.

use std::path::Path;

use crate::error::{CliError, Result};

/// Writes `devlend.1` and one `devlend-<subcommand>.1` per subcommand
/// (nested ones too, as `devlend-mdev-create.1`) into `dir`; returns the
/// files written.
pub fn write_pages(cmd: clap::Command, dir: &Path) -> Result<Vec<String>> {
    std::fs::create_dir_all(dir).map_err(|e| CliError::file("creating", dir, e))?;
    let mut written = Vec::new();
    write_page(cmd, "devlend", dir, &mut written)?;
    Ok(written)
}

fn write_page(cmd: clap::Command, name: &str, dir: &Path, written: &mut Vec<String>) -> Result<()> {
    // A subcommand's page is named after its whole path, as git's are.
    let cmd = cmd.name(name.to_owned()).bin_name(name.replace('-', " "));
    let file = dir.join(format!("{name}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut out)
        .map_err(|e| CliError::file("rendering", &file, e))?;
    std::fs::write(&file, out).map_err(|e| CliError::file("writing", &file, e))?;
    written.push(file.display().to_string());
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let sub_name = format!("{name}-{}", sub.get_name());
        write_page(sub.clone(), &sub_name, dir, written)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_for_every_visible_subcommand() {
        let cmd = clap::Command::new("x")
            .subcommand(clap::Command::new("a").subcommand(clap::Command::new("b")))
            .subcommand(clap::Command::new("hidden").hide(true));
        let dir = tempfile::tempdir().unwrap();
        let mut w = write_pages(cmd, dir.path()).unwrap();
        w.sort();
        let names: Vec<_> = w
            .iter()
            .map(|p| {
                Path::new(p)
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names, ["devlend-a-b.1", "devlend-a.1", "devlend.1"]);
        let page = std::fs::read_to_string(dir.path().join("devlend-a.1")).unwrap();
        assert!(page.contains(".TH devlend-a 1"), "{page}");
        assert!(
            page.contains("devlend a"),
            "synopsis names the command path: {page}"
        );
    }
}
