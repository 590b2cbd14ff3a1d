use super::render::{age, shown, Table};
use super::Ctx;
use crate::error::Result;

pub async fn run(ctx: &Ctx) -> Result<i32> {
    let rows = ctx.engine().await?.list().await?;
    if ctx.out.json_wanted() {
        ctx.out.json(&rows)?;
    } else if ctx.out.quiet() {
        for r in &rows {
            ctx.out.data(&r.name);
        }
    } else {
        let mut table = Table::new(["NAME", "MODE", "TEMPLATE", "STATUS", "BRANCH", "WORKSPACE", "AGE"]);
        let or_dash = |v: Option<&str>| shown(v.unwrap_or("-"));
        for r in rows {
            let place = r.workspace.as_deref().or(r.record_problem.as_deref());
            table.row([
                shown(&r.name),
                r.mode.map(|m| m.to_string()).unwrap_or_else(|| "-".into()),
                or_dash(r.template.as_deref()),
                r.status.to_string(),
                or_dash(r.branch.as_deref()),
                or_dash(place),
                r.created_at.map(age).unwrap_or_else(|| "-".into()),
            ]);
        }
        ctx.out.data_block(table.to_string());
    }
    Ok(0)
}
