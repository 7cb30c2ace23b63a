# %transfiletriggerin of the rocm-kpack-fetch rpm (built into its header by
# `rocm-kpack publish`; paths: /opt /usr/lib /usr/lib64 /usr/local).
# Runs once after a transaction that installed files below those paths;
# rpm passes their names on stdin, and `trigger --stdin` acts only when a
# .kpack/*.kpm manifest is among them. It never calls rpm or dnf (the
# database is locked), hands the download to rocm-kpack-fetch.service when
# systemd runs, and always exits 0. ROCM_KPACK_FETCH_SKIP=1 skips it.
if [ -x /usr/bin/rocm-kpack-fetch ]; then
    /usr/bin/rocm-kpack-fetch trigger --stdin || :
fi
