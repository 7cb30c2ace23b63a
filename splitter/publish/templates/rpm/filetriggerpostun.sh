# %filetriggerpostun of the rocm-kpack-fetch rpm (same paths as the
# install trigger). Runs after each package that removed files below them,
# when that package's manifest is gone (%transfiletriggerun runs before the
# removal, while it still exists; and rpm 4.18 does not fire a
# %transfiletriggerpostun whose first path matches nothing). rpm passes the
# removed paths on stdin: `trigger --removed --stdin` acts only when a
# .kpack/*.kpm manifest is among them, removing the archives
# rocm-kpack-fetch installed for manifests that no longer exist, and
# nothing else. Always exits 0.
if [ -x /usr/bin/rocm-kpack-fetch ]; then
    /usr/bin/rocm-kpack-fetch trigger --removed --stdin || :
fi
