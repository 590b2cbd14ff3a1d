//! Paths are pinned (SPEC §3a): the engine resolves every bind mount's source
//! again at each start of a container, so a host path forage checked at `up` is
//! proved to be the same object, with no symlink on its way and the same verdict
//! of the guard, before every start (`up`, `start`, `restart`, `reset`, and the
//! helper containers that read a stopped sandbox's work).
//!
//! That proof holds only while nothing writes the path's ancestors between the
//! check and the engine's mount. The sandbox's own agent is stopped then; no
//! other agent may write them either: a sandbox whose writable paths hold
//! another sandbox's mounted paths (or whose mounted paths lie inside another's
//! writable ones) is refused (`refuse_overlap`).

use std::path::{Path, PathBuf};

use super::Engine;
use crate::error::{Error, Result};
use crate::host_paths::pin::Pin;
use crate::host_paths::{resolved, Exposure, Guard};
use crate::names::SandboxName;
use crate::record::Record;
use crate::runtime::{Mount, Runtime};
use crate::template::{self, ImageSpec, Origin};

/// A host path a sandbox mounts, and whether its agent can write beneath it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostPath {
    pub path: PathBuf,
    pub writable: bool,
}

impl HostPath {
    pub fn of_mounts(mounts: &[Mount]) -> Vec<HostPath> {
        mounts.iter().map(|m| HostPath { path: m.source.clone(), writable: !m.read_only }).collect()
    }
}

/// The host paths a sandbox's record says it mounts: its pins, or for a record
/// of an older forage, its workspace's mounts and the secret files it names.
fn host_paths_of(record: &Record, guard: &Guard) -> Vec<HostPath> {
    if !record.pins.is_empty() {
        return record.pins.iter().map(|p| HostPath { path: p.path.clone(), writable: p.writable }).collect();
    }
    let mut out = HostPath::of_mounts(&record.workspace.mounts(record.options.read_only, guard));
    out.extend(
        record
            .options
            .secrets
            .iter()
            .filter_map(|s| s.file())
            .map(|path| HostPath { path: path.to_owned(), writable: false }),
    );
    out
}

/// How two sandboxes' paths clash, if they do: a path one mounts lies strictly
/// inside a path the other's agent writes, so that agent could swap it (or any
/// directory on its way) for a symlink before the engine mounts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Clash {
    /// Our agent could write beneath the other's path: (ours, theirs).
    OursHoldsTheirs(PathBuf, PathBuf),
    /// Their agent could write beneath our path: (theirs, ours).
    TheirsHoldsOurs(PathBuf, PathBuf),
}

fn beneath(path: &Path, writable: &Path) -> bool {
    path.starts_with(writable) && path != writable
}

pub(crate) fn clash(ours: &[HostPath], theirs: &[HostPath]) -> Option<Clash> {
    for w in ours.iter().filter(|w| w.writable) {
        if let Some(t) = theirs.iter().find(|t| beneath(&t.path, &w.path)) {
            return Some(Clash::OursHoldsTheirs(w.path.clone(), t.path.clone()));
        }
    }
    for w in theirs.iter().filter(|w| w.writable) {
        if let Some(o) = ours.iter().find(|o| beneath(&o.path, &w.path)) {
            return Some(Clash::TheirsHoldsOurs(w.path.clone(), o.path.clone()));
        }
    }
    None
}

impl<R: Runtime> Engine<R> {
    /// Refuses `paths` for sandbox `name` when they clash with another
    /// sandbox's (`clash`).
    pub(crate) fn refuse_overlap(&self, name: &SandboxName, paths: &[HostPath]) -> Result<()> {
        let guard = super::plan::guard(&self.home, &self.settings);
        let (records, _) = self.home.load_all()?;
        for other in records.iter().filter(|r| &r.name != name) {
            let fix = |what: String| {
                Error::conflict(what)
                    .hint(format!("mount another directory, or remove sandbox {} first", other.name))
                    .hint_run("({command})", ["down", other.name.as_str()])
            };
            match clash(paths, &host_paths_of(other, &guard)) {
                None => {}
                Some(Clash::OursHoldsTheirs(ours, theirs)) => return Err(fix(format!(
                    "sandbox {name} would write {}, which holds {} that sandbox {} mounts: its agent could swap that for a symlink to any host path before {}'s next start",
                    ours.display(), theirs.display(), other.name, other.name
                ))),
                Some(Clash::TheirsHoldsOurs(theirs, ours)) => return Err(fix(format!(
                    "sandbox {name} would mount {}, which lies inside {}, written by sandbox {}'s agent: it could swap it for a symlink to any host path before {name}'s next start",
                    ours.display(), theirs.display(), other.name
                ))),
            }
        }
        Ok(())
    }

    /// Who could write `path`, if an agent could: the writable path it lies in,
    /// and whose agent writes that ("this sandbox's agent" for `also`, the new
    /// sandbox's own writable paths, else another sandbox's).
    fn agent_writing(&self, path: &Path, also: &[HostPath]) -> Result<Option<(String, PathBuf)>> {
        let beneath = |paths: &[HostPath]| paths.iter().find(|w| w.writable && path.starts_with(&w.path)).cloned();
        if let Some(w) = beneath(also) {
            return Ok(Some(("this sandbox's agent".into(), w.path)));
        }
        let guard = super::plan::guard(&self.home, &self.settings);
        let (records, _) = self.home.load_all()?;
        Ok(records
            .iter()
            .find_map(|r| beneath(&host_paths_of(r, &guard)).map(|w| (format!("sandbox {}'s agent", r.name), w.path))))
    }

    /// Refuses a secret file the agent of some sandbox could write (or one of
    /// forage's own files): it could be a symlink to a private key by the time
    /// `up` reads it. `also` are the new sandbox's own writable paths.
    pub(crate) fn refuse_secret_in_reach(&self, path: &Path, secret: &str, also: &[HostPath]) -> Result<()> {
        let why = if path.starts_with(self.home.root()) {
            "is inside FORAGE_HOME, where agents' files are".to_owned()
        } else {
            match self.agent_writing(path, also)? {
                Some((whose, writable)) => format!("is inside {}, which {whose} writes", writable.display()),
                None => return Ok(()),
            }
        };
        Err(Error::usage(format!(
            "secret file {} (for {secret}) {why}; keep secrets outside every workspace, e.g. in ~/.config/forage/secrets",
            path.display()
        )))
    }

    /// Refuses a template (its file, or its build context) that lies where an
    /// agent writes: the agent could change what the next `up` or `reset`
    /// mounts, or the image other sandboxes run. `also` are the new sandbox's
    /// own writable paths.
    pub(crate) fn refuse_template_in_reach(&self, template: &template::Resolved, also: &[HostPath]) -> Result<()> {
        let Origin::File(file) = &template.origin else { return Ok(()) };
        let mut read = vec![resolved(file)];
        if let (ImageSpec::Build(build), Some(dir)) = (&template.template.image, template.dir()) {
            read.push(resolved(&dir.join(&build.context)));
        }
        for path in read {
            if let Some((whose, writable)) = self.agent_writing(&path, also)? {
                return Err(Error::usage(format!(
                    "template {} is read from {}, inside {}, which {whose} writes: it could change what the next `up` or `reset` mounts, or the image sandboxes run; keep templates outside every workspace",
                    template.name,
                    path.display(),
                    writable.display()
                )));
            }
        }
        Ok(())
    }

    /// Pins every source of `mounts` of `record`'s container: each checked
    /// (no symlink on its way; outside FORAGE_HOME, the guard's verdict) and
    /// remembered as the object it is now.
    pub(crate) fn pin_mounts(&self, record: &Record, mounts: &[Mount]) -> Result<Vec<Pin>> {
        let guard = super::plan::guard(&self.home, &self.settings);
        let mut pins: Vec<Pin> = Vec::new();
        for m in mounts {
            if pins.iter().any(|p| p.path == m.source) {
                continue;
            }
            let pin = Pin::take(&m.source, !m.read_only).map_err(|moved| {
                Error::workspace(format!(
                    "{} changed while forage was checking it ({moved}); nothing was started on it",
                    m.source.display()
                ))
            })?;
            self.refuse_by_guard(record, &guard, &pin, Guard::refusal)?;
            pins.push(pin);
        }
        Ok(pins)
    }

    /// Before a container of `record`'s starts on `mounts` (its own, or a
    /// helper's): every source pinned, still the same object through no
    /// symlink, and still allowed by the guard. A record of an older forage
    /// has no pins: its paths get the checks `up` makes now, and the pins
    /// they make are returned, for the caller to keep.
    pub(crate) fn check_pinned(&self, record: &Record, mounts: &[Mount]) -> Result<Option<Vec<Pin>>> {
        if record.pins.is_empty() {
            return self.pin_mounts(record, mounts).map(Some);
        }
        let guard = super::plan::guard(&self.home, &self.settings);
        // Outer paths first: a replaced workspace is named as such, not as the
        // mount inside it that went missing with it.
        let mut mounts: Vec<&Mount> = mounts.iter().collect();
        mounts.sort_by(|a, b| a.source.cmp(&b.source));
        for m in mounts {
            let Some(pin) = record.pins.iter().find(|p| p.path == m.source) else {
                return Err(Error::workspace(format!(
                    "the container of sandbox {} mounts {}, which forage never checked; forage will not start it",
                    record.name,
                    m.source.display()
                ))
                .hint_run(
                    "make the container again from the sandbox's record with {command}",
                    ["reset", record.name.as_str()],
                ));
            };
            pin.verify().map_err(|moved| {
                Error::workspace(format!(
                    "sandbox {} mounts {}, which is not what forage checked at `up`: {moved}; forage will not start a container on it",
                    record.name,
                    m.source.display()
                ))
                .hint("if you changed it yourself, remove the sandbox and `up` it again (`down` keeps the work of a git or jj sandbox, and never touches a direct workspace)")
            })?;
            self.refuse_by_guard(record, &guard, pin, Guard::refusal_before_start)?;
        }
        Ok(None)
    }

    /// The guard's verdict (`rules`: `Guard::refusal` or the one before a
    /// start) on a pinned path outside FORAGE_HOME (forage's own paths there
    /// are the sandbox's, made by forage).
    fn refuse_by_guard(
        &self,
        record: &Record,
        guard: &Guard,
        pin: &Pin,
        rules: fn(&Guard, &Path, Exposure) -> Option<String>,
    ) -> Result<()> {
        if pin.path.starts_with(self.home.root()) {
            return Ok(());
        }
        let exposure = if pin.writable { Exposure::Writable } else { Exposure::ReadOnly };
        let why = rules(guard, &pin.path, exposure).or_else(|| {
            (pin.writable && !record.options.allow_home && guard.exposes_user_home(&pin.path))
                .then(|| "it is (or holds) your home directory, and the sandbox was not made with --allow-home".into())
        });
        match why {
            None => Ok(()),
            Some(why) => Err(Error::usage(format!(
                "sandbox {} mounts {}, which forage refuses to hand an agent: {why}",
                record.name,
                pin.path.display()
            ))
            .hint("remove the sandbox, or move what makes the path dangerous out of it")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(path: &str, writable: bool) -> HostPath {
        HostPath { path: PathBuf::from(path), writable }
    }

    #[test]
    fn a_writable_path_may_not_hold_another_sandboxs_mounted_path() {
        let direct = [hp("/src/repo", true)];
        let git = [hp("/home/forage/workspaces/b", true), hp("/src/repo/.git/objects", false)];
        assert_eq!(
            clash(&direct, &git),
            Some(Clash::OursHoldsTheirs("/src/repo".into(), "/src/repo/.git/objects".into()))
        );
        assert_eq!(
            clash(&git, &direct),
            Some(Clash::TheirsHoldsOurs("/src/repo".into(), "/src/repo/.git/objects".into()))
        );
        // Two sandboxes on one directory: neither can swap the other's mount itself.
        assert_eq!(clash(&direct, &direct), None);
        // A read-only mount holds nothing an agent can swap.
        assert_eq!(clash(&[hp("/src", false)], &git), None);
        assert_eq!(clash(&[hp("/src/repo-b", true)], &direct), None, "a sibling is not beneath");
    }
}
