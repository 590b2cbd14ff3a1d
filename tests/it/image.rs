//! The offline default image: built from scratch by this test run.

use std::collections::HashMap;

use bollard::query_parameters::{ListImagesOptions, RemoveImageOptions};

use crate::support::*;

fn default_images() -> Vec<String> {
    let filters = HashMap::from([("reference".to_string(), vec!["forage-host/shell".to_string()])]);
    block_on(docker().list_images(Some(ListImagesOptions { filters: Some(filters), ..Default::default() })))
        .unwrap()
        .into_iter()
        .flat_map(|i| i.repo_tags)
        // Podman names an image of no registry `localhost/…`; Docker names it as given.
        .map(|t| t.strip_prefix("localhost/").map(str::to_owned).unwrap_or(t))
        .collect()
}

#[test]
fn up_builds_the_default_image_offline_when_it_is_missing_and_reuses_it() {
    // Exclusive: no other test is using the image while it is deleted.
    let env = Env::with_image_lock(true);
    for tag in default_images() {
        let opts = RemoveImageOptions { force: true, ..Default::default() };
        block_on(docker().remove_image(&tag, Some(opts), None)).unwrap();
    }
    assert!(default_images().is_empty());

    let ws = env.mkdir("ws");
    let out = env.run(&["up", "fresh", "--workspace", ws.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    let images = default_images();
    assert_eq!(images.len(), 1, "{images:?}");
    let image = block_on(docker().inspect_image(&images[0])).unwrap();
    let labels = image.config.unwrap().labels.unwrap();
    assert_eq!(format!("forage-host/shell:{}", labels["forage.image.key"]), images[0]);

    // The host's tools work inside, including git.
    let out =
        env.ok(&["exec", "fresh", "--", "sh", "-c", "ls / >/dev/null && git --version && bash -c 'echo bash-ok'"]);
    assert!(out.contains("git version") && out.contains("bash-ok"), "{out}");

    // A second sandbox reuses the cached image instead of building again.
    let id = image.id.unwrap();
    env.ok(&["up", "again", "--workspace", ws.to_str().unwrap()]);
    assert_eq!(default_images(), images);
    assert_eq!(block_on(docker().inspect_image(&images[0])).unwrap().id.unwrap(), id);
    env.ok(&["down", "fresh", "again"]);
    env.assert_nothing_left();
}
