//! `devlend man` (hidden): the manual pages, for the package build.

use std::path::Path;

use crate::error::Result;

/// Writes `devlend.1` and a page per subcommand of `cmd` into `dir`;
/// returns the files written.
pub fn run(cmd: clap::Command, dir: &Path) -> Result<Vec<String>> {
    crate::man::write_pages(cmd, dir)
}
