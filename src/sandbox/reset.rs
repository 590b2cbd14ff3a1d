//! `reset`: a new container for an existing sandbox, made from its template as the
//! template is now, with the options `up` was given. The workspace (directory,
//! worktree and branch, or jj workspace) is not touched, so no work can be lost.

use super::plan::{check_secret_files, container_spec, extra_mounts, image_source, limits, secret_env};
use super::Engine;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::Runtime;
use crate::store::{Record, RecordState};
use crate::template;
use crate::workspace::WorkspaceRecord;

impl<R: Runtime> Engine<'_, R> {
    /// Replaces the sandbox's container. Everything that can be refused (the
    /// template, its secrets and mounts, the image) is settled while the old
    /// container still runs; only then is it swapped. A failure after the swap
    /// began leaves the sandbox `missing` or stopped, never half a workspace, and
    /// `reset` again finishes it.
    ///
    /// `resolve` finds a template by name (the record's), as `up` would.
    pub async fn reset(
        &self,
        name: &SandboxName,
        resolve: impl Fn(&str) -> Result<template::Resolved>,
    ) -> Result<Record> {
        let _lock = self.lock_sandbox(name).await?;
        let mut record = self.record(name)?;
        if record.state != RecordState::Ready {
            return Err(Error::Conflict(format!(
                "sandbox {name} is half made or half removed, so there is nothing to reset; finish with `forage-ctl down {name}`"
            )));
        }
        let legacy = match &record.workspace {
            WorkspaceRecord::GitWorktree(g) => g.private.is_none(),
            WorkspaceRecord::Jj(j) => j.is_legacy(),
            WorkspaceRecord::Direct { .. } => false,
        };
        if legacy {
            return Err(Error::Conflict(format!(
                "sandbox {name} was made by an older forage, whose {} sandboxes shared the repository with the agent; `forage-ctl down {name}` keeps its work, and `forage-ctl up` makes a new, isolated sandbox",
                record.workspace.mode()
            )));
        }
        let template = &resolve(&record.template)?;
        let options = &record.options;
        // Refused before a possibly slow image build (container_spec checks again).
        limits(template, options)?;
        secret_env(template, options)?;
        extra_mounts(template, options, self.home.root())?;
        record.workspace.check_host_paths(self.home.root())?;
        check_secret_files(options)?;
        let source = image_source(template, options)?;
        let image = self.runtime.ensure_image(&source, self.progress).await?;
        let mut spec = container_spec(name, template, options, &record.workspace, image.clone(), &self.home)?;
        self.check_program(&spec)?;
        let read_only = options.read_only || template.template.workspace.read_only;
        let mut mounts = record.workspace.mounts(read_only);
        mounts.append(&mut spec.mounts);
        spec.mounts = mounts;

        self.step(&format!("removing container {}", record.container));
        self.runtime.stop(&record.container, record.stop_timeout).await?;
        self.runtime.remove(&record.container).await?;
        // From here on the record describes the new container.
        record.image = image.reference;
        record.stop_timeout = template.template.stop_timeout;
        record.init = template.template.init.clone();
        self.home.save(&record)?;

        let made = async {
            self.step(&format!("creating container {}", spec.name));
            self.runtime.create(&spec).await?;
            if let Err(e) = self.start_agent(&record).await {
                // The agent's launcher would wait for init forever: stop it instead.
                self.runtime.stop(&spec.name, record.stop_timeout).await?;
                return Err(e);
            }
            Ok(())
        };
        if let Err(e) = made.await {
            self.progress.finish();
            return Err(e.with_note(format!(
                "the old container is gone and the workspace is untouched: fix the cause and run `forage-ctl reset {name}` again, or remove the sandbox with `forage-ctl down {name}`"
            )));
        }
        self.progress.finish();
        Ok(record)
    }
}
