//! git's own object checks (`git fsck --strict`, which is what a host with
//! `receive.fsckObjects` applies), ported for what the import admits: every
//! message git's fsck gives at error or warning severity refuses the object;
//! where jj (which reads the same objects through gix) is stricter, its rule
//! applies too. Each submodule names the git or jj source its rules come from.

mod commit;
mod gitmodules;
mod names;
mod tag;
mod tree;
mod url;

pub use commit::check_commit;
pub use gitmodules::{check_gitattributes, check_gitmodules};
pub use names::{check_name, EntryKind, Special};
pub use tree::check_tree;
