//! Another local user, for tests about ownership and permissions.

use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// A throwaway system user (`servery-test-<random>`, no home directory), for tests about
/// what another local user can do; removed when dropped, also when the test fails.
/// Created only when the tests run as root: [`OtherUser::create`] otherwise says why not.
#[derive(Debug)]
pub struct OtherUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// `useradd` and `userdel` lock `/etc/passwd`: one at a time within this process.
fn accounts() -> MutexGuard<'static, ()> {
    static ACCOUNTS: Mutex<()> = Mutex::new(());
    ACCOUNTS.lock().unwrap_or_else(|p| p.into_inner())
}

impl OtherUser {
    /// A new user, or why none can be made here (the test then skips, saying so).
    pub fn create() -> Result<OtherUser, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("not running as root, so no second user can be created".into());
        }
        for tool in ["useradd", "userdel", "setpriv"] {
            if Command::new(tool).arg("--help").output().is_err() {
                return Err(format!("`{tool}` is not installed"));
            }
        }
        let random = std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            (std::process::id(), Instant::now()),
        );
        let name = format!("servery-test-{:08x}", random as u32);
        let added = {
            let _lock = accounts();
            Command::new("useradd")
                .args(["--system", "--no-create-home", "--user-group"])
                .arg(&name)
                .output()
                .map_err(|e| format!("useradd: {e}"))?
        };
        if !added.status.success() {
            return Err(format!(
                "useradd {name} failed: {}",
                String::from_utf8_lossy(&added.stderr).trim()
            ));
        }
        // From here on the guard removes the user, whatever happens next.
        let mut user = OtherUser {
            name,
            uid: 0,
            gid: 0,
        };
        user.uid = user.id("-u")?;
        user.gid = user.id("-g")?;
        assert!(user.uid != 0 && user.gid != 0, "{user:?}");
        Ok(user)
    }

    fn id(&self, which: &str) -> Result<u32, String> {
        let out = Command::new("id")
            .args([which, &self.name])
            .output()
            .map_err(|e| format!("id: {e}"))?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|e| format!("id {which} {}: {e}", self.name))
    }

    /// `program` run as this user (its uid, its group, no supplementary groups), through
    /// `setpriv`, which execs it: the pid is the program's.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .args(["--clear-groups", "--"])
            .arg(program);
        cmd
    }
}

impl Drop for OtherUser {
    fn drop(&mut self) {
        let _lock = accounts();
        let removed = Command::new("userdel").arg(&self.name).output();
        match removed {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "WARNING: userdel {} failed: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => eprintln!("WARNING: userdel {}: {e}", self.name),
        }
    }
}
