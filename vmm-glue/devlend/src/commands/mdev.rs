//! `devlend mdev ...`: the mdevs that stand for remote devices, one file
//! per subcommand.

pub mod create;
pub mod incoming;
pub mod list;
pub mod remove;
pub mod types;
