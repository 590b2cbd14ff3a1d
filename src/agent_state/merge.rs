//! Which of a sandbox's state files replace the store's copy: the rules of
//! newest-wins, as a pure function so that they can be read (and tested) in
//! one place.
//!
//! For each file the sandbox was given or holds now:
//! - unchanged since it was given: nothing;
//! - changed (or deleted) while the store still holds what the sandbox was
//!   given: the sandbox's version is taken (a deletion deletes);
//! - changed while the store moved on (another sandbox wrote back first): the
//!   newer wins, the sandbox's time being its file's modification time clamped
//!   to [when it was given, now] (an agent cannot claim the future); on a tie
//!   the store keeps its copy. A deletion never beats a newer copy.

use std::collections::BTreeMap;

/// The store's copy of one file: its hash and when its content last changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreFile {
    pub sha256: String,
    pub changed_at: u64,
}

/// One file of the sandbox, as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// `None`: the agent deleted it (or never had it).
    pub sha256: Option<String>,
    pub mtime: u64,
}

/// What to do to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write the sandbox's version, as changed at this time.
    Write {
        changed_at: u64,
    },
    Delete,
}

/// The actions for each file of `current` (the files of the state paths that
/// could be read, skipped ones left out), given what the sandbox was given
/// (`given`, `given_at`) and what the store holds (`store`), at time `now`.
pub fn decide(
    current: &BTreeMap<String, Current>,
    given: &BTreeMap<String, Option<String>>,
    given_at: u64,
    store: &BTreeMap<String, StoreFile>,
    now: u64,
) -> BTreeMap<String, Action> {
    let mut actions = BTreeMap::new();
    for (file, cur) in current {
        let was_given = given.get(file).cloned().flatten();
        if cur.sha256 == was_given {
            continue;
        }
        let held = store.get(file);
        let store_unchanged = held.map(|s| &s.sha256) == was_given.as_ref();
        let changed_at = cur.mtime.clamp(given_at.min(now), now);
        let action = match (&cur.sha256, store_unchanged) {
            (None, true) => held.map(|_| Action::Delete),
            (None, false) => None,
            (Some(_), true) => Some(Action::Write { changed_at }),
            // Someone else's write-back came first: the newer content wins.
            (Some(sha), false) => match held {
                Some(s) if &s.sha256 == sha => None,
                Some(s) if s.changed_at >= changed_at => None,
                _ => Some(Action::Write { changed_at }),
            },
        };
        if let Some(action) = action {
            actions.insert(file.clone(), action);
        }
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: &str = ".claude/.credentials.json";

    fn cur(sha: Option<&str>, mtime: u64) -> BTreeMap<String, Current> {
        BTreeMap::from([(F.to_owned(), Current { sha256: sha.map(str::to_owned), mtime })])
    }
    fn given(sha: Option<&str>) -> BTreeMap<String, Option<String>> {
        BTreeMap::from([(F.to_owned(), sha.map(str::to_owned))])
    }
    fn store(sha: &str, at: u64) -> BTreeMap<String, StoreFile> {
        BTreeMap::from([(F.to_owned(), StoreFile { sha256: sha.into(), changed_at: at })])
    }

    #[test]
    fn a_change_replaces_the_copy_it_started_from() {
        let a = decide(&cur(Some("n2"), 150), &given(Some("n1")), 100, &store("n1", 50), 200);
        assert_eq!(a[F], Action::Write { changed_at: 150 });
        // An unchanged file changes nothing, however old the store's copy.
        assert!(decide(&cur(Some("n1"), 150), &given(Some("n1")), 100, &store("n0", 300), 400).is_empty());
    }

    #[test]
    fn newest_wins_once_another_sandbox_wrote_back() {
        // Store moved on at 180; this sandbox's change is from 150: kept out.
        assert!(decide(&cur(Some("a"), 150), &given(Some("n1")), 100, &store("b", 180), 200).is_empty());
        // ... and from 190: taken.
        let a = decide(&cur(Some("a"), 190), &given(Some("n1")), 100, &store("b", 180), 200);
        assert_eq!(a[F], Action::Write { changed_at: 190 });
        // A time in the future is now; one before the sandbox was given is then.
        let a = decide(&cur(Some("a"), 9_999), &given(Some("n1")), 100, &store("n1", 50), 200);
        assert_eq!(a[F], Action::Write { changed_at: 200 });
        let a = decide(&cur(Some("a"), 1), &given(Some("n1")), 100, &store("n1", 50), 200);
        assert_eq!(a[F], Action::Write { changed_at: 100 });
        // A tie keeps the store's copy.
        assert!(decide(&cur(Some("a"), 180), &given(Some("n1")), 100, &store("b", 180), 200).is_empty());
    }

    #[test]
    fn a_deletion_deletes_only_what_the_sandbox_was_given() {
        let a = decide(&cur(None, 0), &given(Some("n1")), 100, &store("n1", 50), 200);
        assert_eq!(a[F], Action::Delete);
        assert!(decide(&cur(None, 0), &given(Some("n1")), 100, &store("n2", 150), 200).is_empty());
        // A file it never had and does not have: nothing.
        assert!(decide(&cur(None, 0), &given(None), 100, &store("n2", 150), 200).is_empty());
    }

    #[test]
    fn a_new_file_is_taken_when_the_store_has_none() {
        let a = decide(&cur(Some("x"), 150), &given(None), 100, &BTreeMap::new(), 200);
        assert_eq!(a[F], Action::Write { changed_at: 150 });
    }
}
