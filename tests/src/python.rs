//! What the tests of Python applications share.

use std::process::Command;

use crate::Tree;

/// Whether the interpreter servery embeds can import every one of `modules`; when it
/// cannot, says SKIPPED with the first it lacks (the caller then returns).
pub fn python_imports(modules: &[&str]) -> bool {
    for module in modules {
        let ok = Command::new("python3")
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            crate::skipped(format!(
                "python3 cannot import {module} (scripts/test installs it)"
            ));
            return false;
        }
    }
    true
}

/// A test tree whose `app/MODULE.py` holds `source` (the folder `--app-dir` names).
pub fn python_app_tree(name: &str, module: &str, source: &str) -> Tree {
    let tree = Tree::new(name);
    std::fs::create_dir_all(tree.dir.join("app")).expect("app dir");
    std::fs::write(tree.dir.join(format!("app/{module}.py")), source).expect("write app");
    tree
}
