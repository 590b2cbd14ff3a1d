//! Jobs: a sandbox made from a repository URL rather than from a checkout
//! of the user's, with its context kept on disk as an audit trail that
//! outlives the sandbox. `up --job` (and MCP's `job`) fetches the source into
//! forage's mirror (`mirror`), makes a git-worktree sandbox from the mirror
//! on branch forage-NAME, and writes FORAGE_HOME/jobs/NAME/job.json: the
//! task, a status (queued, running, done, failed), the times, and, once the
//! sandbox is torn down, the agent's exit code, its output's tail and the
//! result (commits and a diff summary). `down` (or `--cleanup`, once the
//! agent exits) records the result before it removes anything; `gc` keeps
//! the newest `KEEP_FINISHED` finished jobs' contexts.

pub mod mirror;

use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::{Error, ErrorKind, Result};
use crate::names::SandboxName;
use crate::record::Record;
use crate::runtime::{Output, Runtime};
use crate::sandbox::{DiffPart, Engine, UpSpec, WorkspaceSpec};
use crate::store::Home;

/// How many finished jobs' contexts `gc` keeps (the newest).
pub const KEEP_FINISHED: usize = 100;

/// The most of the agent's output a context keeps: its last lines, up to this many bytes.
const OUTPUT_TAIL: usize = 16 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobStatus {
    /// Written before anything is made.
    Queued,
    /// Its sandbox is up.
    Running,
    /// Its sandbox went: the agent exited 0, or was torn down still running.
    Done,
    /// Its sandbox could not be made (the fetch failed, say), or the agent exited non-zero.
    Failed,
}

/// A job's context, as FORAGE_HOME/jobs/NAME/job.json holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    pub name: String,
    /// The source, as forage keys its mirror (`file:///…`).
    pub source: String,
    pub mirror: PathBuf,
    /// The job's branch, in the mirror.
    pub branch: Option<String>,
    pub template: String,
    pub task: Option<String>,
    pub status: JobStatus,
    /// Tear the sandbox down once the agent exits.
    pub cleanup: bool,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
    pub started_at: Option<u64>,
    pub finished_at: Option<u64>,
    /// Why it failed, when it did before its agent ran.
    pub error: Option<String>,
    /// The agent's exit code, when it had exited by the time its sandbox went.
    pub exit_code: Option<i64>,
    /// The last lines the agent printed.
    pub output_tail: Option<String>,
    /// The agent's commits and a summary of its change.
    pub result: Option<Value>,
    /// Whether its sandbox exists (read, never stored).
    #[serde(default, skip_deserializing)]
    pub sandbox: bool,
}

fn jobs_dir(home: &Home) -> PathBuf {
    home.root().join("jobs")
}

fn job_file(home: &Home, name: &str) -> PathBuf {
    jobs_dir(home).join(name).join("job.json")
}

/// The context of job `name`, if there is one.
pub fn load(home: &Home, name: &str) -> Result<Option<Job>> {
    let path = job_file(home, name);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let mut job: Job = serde_json::from_slice(&bytes)
                .map_err(|e| Error::other(format!("reading the job context {}: {e}", path.display())))?;
            job.sandbox = SandboxName::parse(name).is_ok_and(|n| home.record_exists(&n));
            Ok(Some(job))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::other(format!("reading {}: {e}", path.display()))),
    }
}

/// Every job's context, oldest first.
pub fn all(home: &Home) -> Result<Vec<Job>> {
    let Ok(entries) = std::fs::read_dir(jobs_dir(home)) else { return Ok(Vec::new()) };
    let mut jobs = Vec::new();
    for entry in entries.flatten() {
        if let Some(job) = entry.file_name().to_str().map(|n| load(home, n)).transpose()?.flatten() {
            jobs.push(job);
        }
    }
    jobs.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
    Ok(jobs)
}

/// Writes the context, atomically (a reader sees the old one or the new one).
fn save(home: &Home, job: &Job) -> Result<()> {
    let path = job_file(home, &job.name);
    let dir = path.parent().expect("a job's directory");
    std::fs::create_dir_all(dir).map_err(|e| Error::other(format!("creating {}: {e}", dir.display())))?;
    let bytes = serde_json::to_vec_pretty(job).map_err(Error::other)?;
    let tmp = dir.join(format!(".job.json.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| Error::other(format!("writing {}: {e}", path.display())))
}

/// Makes job `name`'s directory, failing if it exists: of two requests for
/// one name, one gets it (an exclusive create, not a look then a write).
fn claim(home: &Home, name: &str) -> Result<()> {
    let dir = jobs_dir(home).join(name);
    std::fs::create_dir_all(jobs_dir(home)).map_err(|e| Error::other(format!("creating {}: {e}", dir.display())))?;
    match std::fs::create_dir(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(Error::conflict(format!("job {name} exists: its context is kept in {}", dir.display())).hint(
                "give the job another name (`forage-ctl jobs` lists them; `gc` removes the oldest finished ones)",
            ))
        }
        Err(e) => Err(Error::other(format!("creating {}: {e}", dir.display()))),
    }
}

fn remove(home: &Home, name: &str) {
    let _ = std::fs::remove_dir_all(jobs_dir(home).join(name));
}

/// The finished jobs' contexts past the newest `keep`, whose sandboxes are gone:
/// what `gc` removes.
pub fn beyond(home: &Home, keep: usize) -> Result<Vec<PathBuf>> {
    let finished: Vec<Job> = all(home)?
        .into_iter()
        .filter(|j| matches!(j.status, JobStatus::Done | JobStatus::Failed) && !j.sandbox)
        .collect();
    let old = finished.len().saturating_sub(keep);
    Ok(finished.iter().take(old).map(|j| jobs_dir(home).join(&j.name)).collect())
}

/// The job `spec` asks for: `source` is a path, a file:// URL or a network
/// URL (https://, http://, git://).
pub struct JobSpec {
    pub up: UpSpec,
    pub source: String,
    pub cleanup: bool,
}

impl<R: Runtime> Engine<R> {
    /// Starts a job: its context (queued), the mirror fetched, the sandbox made
    /// from it (running). A job whose sandbox could not be made keeps its
    /// context, failed, with why; one refused for its input keeps nothing.
    pub async fn start_job(&self, spec: JobSpec) -> Result<(Job, Record)> {
        let name = spec.up.name.clone();
        crate::sandbox::ensure_name_free(&self.home, &name)?;
        let url = mirror::source_url(&spec.source)?;
        // A template that is not there is refused before the mirror is made.
        self.templates().resolve(&spec.up.template)?;
        claim(&self.home, name.as_str())?;
        let dir = mirror::dir(&self.home, &url);
        let mut job = Job {
            name: name.to_string(),
            source: url.clone(),
            mirror: dir.clone(),
            branch: None,
            template: spec.up.template.clone(),
            task: match &spec.up.task {
                Some(crate::sandbox::TaskSpec::Text(t)) => Some(t.clone()),
                _ => None,
            },
            status: JobStatus::Queued,
            cleanup: spec.cleanup,
            created_at: crate::sandbox::now(),
            started_at: None,
            finished_at: None,
            error: None,
            exit_code: None,
            output_tail: None,
            result: None,
            sandbox: false,
        };
        save(&self.home, &job)?;
        match self.make_job_sandbox(spec.up, &url, &dir).await {
            Ok(record) => {
                job.status = JobStatus::Running;
                job.started_at = Some(crate::sandbox::now());
                job.branch = record.workspace.get().branch().map(str::to_owned);
                job.sandbox = true;
                save(&self.home, &job)?;
                Ok((job, record))
            }
            // Refused for what was asked (a template that is not there, say): nothing was done.
            Err(e) if matches!(e.kind(), ErrorKind::Usage | ErrorKind::NotFound) => {
                remove(&self.home, name.as_str());
                Err(e)
            }
            Err(e) => {
                job.status = JobStatus::Failed;
                job.error = Some(e.to_string());
                job.finished_at = Some(crate::sandbox::now());
                save(&self.home, &job)?;
                Err(e.with_note(format!("the job's context is kept in {}", job_file(&self.home, &job.name).display())))
            }
        }
    }

    /// Fetches the source into the mirror (under its lock: one fetch at a
    /// time), then makes a git-worktree sandbox from the mirror.
    async fn make_job_sandbox(&self, mut up: UpSpec, url: &str, dir: &Path) -> Result<Record> {
        {
            let _lock = self.lock_repo(dir).await?;
            self.progress.step(&format!("fetching {url} into forage's mirror"));
            let (dir, url, cancel) = (dir.to_path_buf(), url.to_owned(), self.cancel.clone());
            let fetched = crate::sandbox::blocking(move || mirror::update(&dir, &url, &|| cancel.is_triggered())).await;
            // A fetch stopped for Ctrl-C (or a client gone) fails as interrupted.
            self.cancel.check()?;
            fetched?;
        }
        up.workspace = WorkspaceSpec::GitWorktree(dir.to_path_buf());
        let request = self.prepare_up(up).await?;
        self.up(request).await
    }

    /// Before a job's sandbox goes: records the agent's exit code, its
    /// output's tail, its commits and a summary of its change, and the job's
    /// end. Nothing for a sandbox that is no job's, or a job already recorded.
    pub async fn record_job_result(&self, name: &SandboxName) -> Result<()> {
        let Some(mut job) = load(&self.home, name.as_str())? else { return Ok(()) };
        if job.status != JobStatus::Running {
            return Ok(());
        }
        let record = self.record(name)?;
        let container = self.runtime.inspect(&record.container).await?;
        job.exit_code = container.filter(|c| c.state.has_ended()).and_then(|c| c.exit_code);
        job.output_tail = Some(self.output_tail(&record).await);
        job.result = Some(self.job_result(name).await);
        job.status = match job.exit_code {
            Some(code) if code != 0 => JobStatus::Failed,
            _ => JobStatus::Done,
        };
        job.finished_at = Some(crate::sandbox::now());
        save(&self.home, &job)
    }

    /// `job` as it stands: one its context still calls running whose agent
    /// has exited reads as done (exit code 0) or failed, with the exit code,
    /// while its sandbox is still up. Read from the container, never stored:
    /// the context changes at `down`, which records the result, and a
    /// sandbox started again runs again.
    async fn observe_job(&self, mut job: Job) -> Job {
        if job.status != JobStatus::Running || !job.sandbox {
            return job;
        }
        let Some(record) = SandboxName::parse(&job.name).ok().and_then(|n| self.record(&n).ok()) else { return job };
        if let Ok(Some(container)) = self.runtime.inspect(&record.container).await {
            if container.state.has_ended() {
                job.exit_code = container.exit_code;
                job.status = match container.exit_code {
                    Some(code) if code != 0 => JobStatus::Failed,
                    _ => JobStatus::Done,
                };
            }
        }
        job
    }

    /// Job `name`'s context, if there is one, as `observe_job` sees it.
    pub async fn observed_job(&self, name: &str) -> Result<Option<Job>> {
        Ok(match load(&self.home, name)? {
            Some(job) => Some(self.observe_job(job).await),
            None => None,
        })
    }

    /// Every job's context, as `observe_job` sees it.
    pub async fn observe_jobs(&self) -> Result<Vec<Job>> {
        let mut jobs = Vec::new();
        for job in all(&self.home)? {
            jobs.push(self.observe_job(job).await);
        }
        Ok(jobs)
    }

    /// The last of what the agent printed, as text.
    async fn output_tail(&self, record: &Record) -> String {
        let mut bytes = Vec::new();
        let mut output = self.logs(record, false, Some(50));
        while let Some(Ok(chunk)) = output.next().await {
            let (Output::Stdout(b) | Output::Stderr(b)) = chunk;
            bytes.extend_from_slice(&b);
        }
        let start = bytes.len().saturating_sub(OUTPUT_TAIL);
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    /// The agent's commits and the files it changed, with line counts; what
    /// could not be read says why instead.
    async fn job_result(&self, name: &SandboxName) -> Value {
        let commits = match self.log(name).await {
            Ok(log) => {
                json!(log.commits.iter().map(|c| json!({ "id": c.id, "summary": c.summary })).collect::<Vec<_>>())
            }
            Err(e) => json!({ "error": e.to_string() }),
        };
        let files = match self.diff(name, None, DiffPart::All).await {
            Ok(diff) => json!({
                "files": diff.files.iter().map(|f| json!({
                    "path": f.path, "status": f.status, "additions": f.additions, "deletions": f.deletions,
                })).collect::<Vec<_>>(),
                "additions": diff.files.iter().map(|f| f.additions).sum::<usize>(),
                "deletions": diff.files.iter().map(|f| f.deletions).sum::<usize>(),
            }),
            Err(e) => json!({ "error": e.to_string() }),
        };
        json!({ "commits": commits, "diff": files })
    }
}
