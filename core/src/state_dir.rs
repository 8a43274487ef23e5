//! Whom the state directory (`--state-dir`) may belong to. Servery writes its lock journal
//! there and reads it back at start: a directory another user can write is one where that
//! user can plant a symbolic link under the journal's name and have servery overwrite a
//! file of its choosing, or plant a journal of its own. So the directory must belong to
//! the user servery runs as and be writable by nobody else (no group or other write bit,
//! sticky or not); anything else is refused at start, before anything is bound.

/// What the file system says about the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirFacts {
    /// Its permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Its owner's uid.
    pub owner: u32,
}

/// Why a state directory is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateDirRefusal {
    #[error(
        "is writable by other users (mode {mode:04o}); the state directory must be writable \
         by servery's user alone (chmod go-w)"
    )]
    WritableByOthers { mode: u32 },
    #[error(
        "is owned by uid {owner}, not by the user servery runs as (uid {user}); the state \
         directory must belong to servery's user"
    )]
    NotOwned { owner: u32, user: u32 },
}

/// The rule: owned by `user` (servery's effective uid), no write bit for group or others.
pub fn judge(facts: DirFacts, user: u32) -> Result<(), StateDirRefusal> {
    if facts.owner != user {
        return Err(StateDirRefusal::NotOwned {
            owner: facts.owner,
            user,
        });
    }
    if facts.mode & 0o022 != 0 {
        return Err(StateDirRefusal::WritableByOthers {
            mode: facts.mode & 0o7777,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_directory_of_servery_s_user_is_accepted() {
        for mode in [0o700, 0o755, 0o750, 0o711] {
            assert_eq!(
                judge(DirFacts { mode, owner: 1000 }, 1000),
                Ok(()),
                "rule: a directory of servery's user that only it can write is accepted ({mode:o})"
            );
        }
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        for mode in [0o777, 0o1777, 0o770, 0o702, 0o720] {
            assert_eq!(
                judge(DirFacts { mode, owner: 1000 }, 1000),
                Err(StateDirRefusal::WritableByOthers { mode }),
                "rule: a state directory group or others can write is refused ({mode:o})"
            );
        }
    }

    #[test]
    fn a_directory_of_another_user_is_refused() {
        assert_eq!(
            judge(
                DirFacts {
                    mode: 0o700,
                    owner: 1001
                },
                1000
            ),
            Err(StateDirRefusal::NotOwned {
                owner: 1001,
                user: 1000
            }),
            "rule: a state directory servery's user does not own is refused"
        );
        let message = StateDirRefusal::WritableByOthers { mode: 0o1777 }.to_string();
        assert!(
            message.contains("1777") && message.contains("chmod go-w"),
            "{message}"
        );
    }
}
