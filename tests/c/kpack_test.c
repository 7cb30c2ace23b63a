/* SPDX-License-Identifier: MIT
 *
 * C consumer of librocm_kpack, built by the Rust tests (linked once against
 * librocm_kpack.so, once against librocm_kpack.a) and by the CMake consumer
 * project. Plain C99; every check prints what differed and fails the run.
 *
 *   kpack_test vectors <testdata-dir>
 *       exact bytes, arch and binary order of test_noop/test_zstd.kpack,
 *       error codes, enumeration, path discovery, a load through a marker.
 *   kpack_test split <host-binary> <expect-file>
 *       reads the marker out of the host-only ELF (.rocm_kpack_ref) and the
 *       co_index of every HIPK wrapper (.hipFatBinSegment), then for each
 *       line "<co_index> <target> <expected-code-object-file>" loads the code
 *       object with kpack_load_code_object and compares it byte for byte.
 *   kpack_test clr <dir> <cases-file>
 *       asks for code objects the way CLR does (hip_fatbin.cpp): one cache
 *       for the whole run, and for each case line
 *       "<name> <marker-file> <co_index> <isa> <generic-isa|-> ..." calls
 *       kpack_load_code_object(cache, <dir>/<marker-file>, <dir>/lib/libfoo.so,
 *       co_index, {isa, generic-isa}) and prints "<name> <code> <bytes>"
 *       (the code object as text, or "-"). Lines starting with '#' are
 *       skipped; what follows the fifth field is the caller's.
 */
#define _DEFAULT_SOURCE
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rocm_kpack/kpack.h>

static int failures = 0;

#define CHECK(cond, ...)                                           \
    do {                                                           \
        if (!(cond)) {                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                          \
            fprintf(stderr, "\n");                                 \
            failures++;                                            \
        }                                                          \
    } while (0)

/* A data object of this program, for path discovery. */
static const char discover_anchor[] = "kpack_test anchor";

static unsigned char* read_file(const char* path, size_t* len) {
    FILE* f = fopen(path, "rb");
    unsigned char* buf = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    buf = (unsigned char*)malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Expected kernel: prefix followed by runs of (count, byte). */
static unsigned char* make_expected(const char* prefix, size_t n1, unsigned char b1, size_t n2,
                                    unsigned char b2, size_t* len) {
    size_t p = strlen(prefix);
    unsigned char* buf = (unsigned char*)malloc(p + n1 + n2);
    if (!buf) return NULL;
    memcpy(buf, prefix, p);
    memset(buf + p, b1, n1);
    memset(buf + p + n1, b2, n2);
    *len = p + n1 + n2;
    return buf;
}

static void check_kernel(kpack_archive_t a, const char* bin, const char* arch, const char* prefix,
                         size_t n1, unsigned char b1, size_t n2, unsigned char b2) {
    size_t want_len = 0, got_len = 0;
    void* got = NULL;
    unsigned char* want = make_expected(prefix, n1, b1, n2, b2, &want_len);
    kpack_error_t e = kpack_get_kernel(a, bin, arch, &got, &got_len);
    CHECK(e == KPACK_SUCCESS, "get_kernel(%s, %s) = %d", bin, arch, (int)e);
    if (e == KPACK_SUCCESS && want) {
        CHECK(got_len == want_len, "%s/%s: %zu bytes, want %zu", bin, arch, got_len, want_len);
        CHECK(got_len == want_len && memcmp(got, want, want_len) == 0, "%s/%s: bytes differ", bin, arch);
    }
    kpack_free_kernel(got);
    free(want);
}

static void check_list(kpack_archive_t a, bool arches, const char* const* want, size_t n) {
    size_t count = 0, i;
    kpack_error_t e = arches ? kpack_get_architecture_count(a, &count) : kpack_get_binary_count(a, &count);
    CHECK(e == KPACK_SUCCESS && count == n, "%s count %zu (err %d), want %zu", arches ? "arch" : "binary",
          count, (int)e, n);
    for (i = 0; i < n && i < count; i++) {
        const char* s = NULL;
        e = arches ? kpack_get_architecture(a, i, &s) : kpack_get_binary(a, i, &s);
        CHECK(e == KPACK_SUCCESS && s && strcmp(s, want[i]) == 0, "%s[%zu] = %s, want %s",
              arches ? "arch" : "binary", i, s ? s : "(null)", want[i]);
    }
    {
        const char* s = NULL;
        e = arches ? kpack_get_architecture(a, count, &s) : kpack_get_binary(a, count, &s);
        CHECK(e == KPACK_ERROR_INVALID_ARGUMENT, "index past the end gave %d", (int)e);
    }
}

struct collect {
    char seen[8][32];
    size_t n;
    size_t stop_after;
};

static bool collect_arch(const char* arch, void* user) {
    struct collect* c = (struct collect*)user;
    if (c->n < 8) {
        strncpy(c->seen[c->n], arch, sizeof c->seen[0] - 1);
        c->seen[c->n][sizeof c->seen[0] - 1] = '\0';
    }
    c->n++;
    return c->n < c->stop_after;
}

/* msgpack str header + bytes */
static size_t put_str(unsigned char* out, const char* s) {
    size_t n = strlen(s), h;
    if (n < 32) {
        out[0] = (unsigned char)(0xa0 | n);
        h = 1;
    } else {
        out[0] = 0xd9;
        out[1] = (unsigned char)n;
        h = 2;
    }
    memcpy(out + h, s, n);
    return h + n;
}

static size_t make_marker(unsigned char* out, const char* kernel_name, const char* path) {
    size_t n = 0;
    out[n++] = 0x82;
    n += put_str(out + n, "kpack_search_paths");
    out[n++] = 0x91;
    n += put_str(out + n, path);
    n += put_str(out + n, "kernel_name");
    n += put_str(out + n, kernel_name);
    return n;
}

static int run_vectors(const char* dir) {
    char path[4096];
    kpack_archive_t a = NULL;
    kpack_error_t e;
    static const char* const noop_arches[] = {"gfx900", "gfx906"};
    static const char* const noop_bins[] = {"bin/testapp#0", "lib/libtest.so#0"};
    static const char* const zstd_arches[] = {"gfx1100", "gfx1101"};
    static const char* const zstd_bins[] = {"bin/hiptest#0", "lib/libhip.so#0"};

    /* Argument errors */
    CHECK(kpack_open(NULL, &a) == KPACK_ERROR_INVALID_ARGUMENT, "open(NULL)");
    CHECK(kpack_open("x", NULL) == KPACK_ERROR_INVALID_ARGUMENT, "open(path, NULL)");
    CHECK(kpack_open("/nonexistent/x.kpack", &a) == KPACK_ERROR_FILE_NOT_FOUND, "open(missing)");
    CHECK(a == NULL, "handle left set after failure");
    kpack_close(NULL);
    kpack_free_kernel(NULL);
    kpack_free_code_object(NULL);
    kpack_cache_destroy(NULL);

    snprintf(path, sizeof path, "%s/test_noop.kpack", dir);
    e = kpack_open(path, &a);
    CHECK(e == KPACK_SUCCESS, "open %s = %d", path, (int)e);
    if (e == KPACK_SUCCESS) {
        size_t n = 0;
        void* data = NULL;
        check_list(a, true, noop_arches, 2);
        check_list(a, false, noop_bins, 2);
        check_kernel(a, "lib/libtest.so#0", "gfx900", "KERNEL1_GFX900_DATA", 100, 0x00, 0, 0);
        check_kernel(a, "lib/libtest.so#0", "gfx906", "KERNEL2_GFX906_DATA", 200, 0x00, 0, 0);
        check_kernel(a, "bin/testapp#0", "gfx900", "KERNEL3_APP_GFX900", 150, 0xFF, 0, 0);
        e = kpack_get_kernel(a, "bin/testapp#0", "gfx906", &data, &n);
        CHECK(e == KPACK_ERROR_KERNEL_NOT_FOUND && data == NULL && n == 0, "missing kernel gave %d", (int)e);
        CHECK(kpack_get_kernel(a, NULL, "gfx900", &data, &n) == KPACK_ERROR_INVALID_ARGUMENT, "NULL binary");
        CHECK(kpack_get_kernel(a, "bin/testapp#0", "gfx900", NULL, &n) == KPACK_ERROR_INVALID_ARGUMENT,
              "NULL data out");
        CHECK(kpack_get_architecture_count(a, NULL) == KPACK_ERROR_INVALID_ARGUMENT, "NULL count");
        CHECK(kpack_get_architecture_count(NULL, &n) == KPACK_ERROR_INVALID_ARGUMENT, "NULL archive");
        kpack_close(a);
        a = NULL;
    }

    snprintf(path, sizeof path, "%s/test_zstd.kpack", dir);
    e = kpack_open(path, &a);
    CHECK(e == KPACK_SUCCESS, "open %s = %d", path, (int)e);
    if (e == KPACK_SUCCESS) {
        check_list(a, true, zstd_arches, 2);
        check_list(a, false, zstd_bins, 2);
        check_kernel(a, "lib/libhip.so#0", "gfx1100", "HIP_KERNEL_GFX1100_", 500, 'A', 500, 'B');
        check_kernel(a, "lib/libhip.so#0", "gfx1101", "HIP_KERNEL_GFX1101_", 300, 'X', 300, 'Y');
        check_kernel(a, "bin/hiptest#0", "gfx1100", "TEST_APP_KERNEL___", 1000, 0x42, 0, 0);
        kpack_close(a);
    }

    /* Enumeration, in gfx_arches order, stopping when asked. */
    {
        struct collect c;
        memset(&c, 0, sizeof c);
        c.stop_after = 100;
        e = kpack_enumerate_architectures(path, collect_arch, &c);
        CHECK(e == KPACK_SUCCESS && c.n == 2 && strcmp(c.seen[0], "gfx1100") == 0 &&
                  strcmp(c.seen[1], "gfx1101") == 0,
              "enumerate gave %d, %zu arches", (int)e, c.n);
        memset(&c, 0, sizeof c);
        c.stop_after = 1;
        e = kpack_enumerate_architectures(path, collect_arch, &c);
        CHECK(e == KPACK_SUCCESS && c.n == 1, "early stop gave %d after %zu", (int)e, c.n);
        CHECK(kpack_enumerate_architectures(NULL, collect_arch, &c) == KPACK_ERROR_INVALID_ARGUMENT, "NULL path");
        CHECK(kpack_enumerate_architectures(path, NULL, &c) == KPACK_ERROR_INVALID_ARGUMENT, "NULL callback");
        CHECK(kpack_enumerate_architectures("/nonexistent.kpack", collect_arch, &c) == KPACK_ERROR_FILE_NOT_FOUND,
              "missing archive");
    }

    /* Path discovery of this program's own data. */
    {
        char found[4096], exe[4096];
        size_t offset = 0;
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = '\0';
        e = kpack_discover_binary_path(discover_anchor, found, sizeof found, &offset);
        CHECK(e == KPACK_SUCCESS && strcmp(found, exe) == 0, "discover gave %d: %s, want %s", (int)e,
              e == KPACK_SUCCESS ? found : "", exe);
        CHECK(offset > 0, "offset %zu", offset);
        CHECK(kpack_discover_binary_path(discover_anchor, found, 4, NULL) == KPACK_ERROR_INVALID_ARGUMENT,
              "tiny buffer");
        CHECK(kpack_discover_binary_path(NULL, found, sizeof found, NULL) == KPACK_ERROR_INVALID_ARGUMENT,
              "NULL address");
        CHECK(kpack_discover_binary_path(discover_anchor, NULL, 10, NULL) == KPACK_ERROR_INVALID_ARGUMENT,
              "NULL buffer");
    }

    /* A load through a marker naming the vector relative to a binary in dir. */
    {
        kpack_cache_t cache = NULL;
        unsigned char marker[256];
        char binary[4096];
        const char* arches[] = {"amdgcn-amd-amdhsa--gfx906", "gfx900"};
        void* co = NULL;
        size_t co_len = 0, want_len = 0;
        unsigned char* want = make_expected("KERNEL2_GFX906_DATA", 200, 0, 0, 0, &want_len);
        make_marker(marker, "lib/libtest.so", "test_noop.kpack");
        snprintf(binary, sizeof binary, "%s/libtest.so", dir);
        CHECK(kpack_cache_create(NULL) == KPACK_ERROR_INVALID_ARGUMENT, "cache_create(NULL)");
        e = kpack_cache_create(&cache);
        CHECK(e == KPACK_SUCCESS && cache != NULL, "cache_create = %d", (int)e);
        e = kpack_load_code_object(cache, marker, binary, 0, arches, 2, &co, &co_len);
        CHECK(e == KPACK_SUCCESS, "load = %d", (int)e);
        CHECK(e != KPACK_SUCCESS || (want && co_len == want_len && memcmp(co, want, want_len) == 0),
              "loaded %zu bytes, want the gfx906 kernel", co_len);
        kpack_free_code_object(co);
        co = NULL;
        e = kpack_load_code_object(cache, marker, binary, 0, arches, 0, &co, &co_len);
        CHECK(e == KPACK_ERROR_INVALID_ARGUMENT, "arch_count 0 gave %d", (int)e);
        e = kpack_load_code_object(cache, marker, binary, 7, arches, 2, &co, &co_len);
        CHECK(e == KPACK_ERROR_KERNEL_NOT_FOUND && co == NULL && co_len == 0, "co_index 7 gave %d", (int)e);
        {
            const char* other[] = {"gfx1100"};
            e = kpack_load_code_object(cache, marker, binary, 0, other, 1, &co, &co_len);
            CHECK(e == KPACK_ERROR_ARCH_NOT_FOUND, "gfx1100 gave %d", (int)e);
        }
        make_marker(marker, "lib/libtest.so", "missing.kpack");
        e = kpack_load_code_object(cache, marker, binary, 0, arches, 2, &co, &co_len);
        CHECK(e == KPACK_ERROR_ARCHIVE_NOT_FOUND, "missing archive gave %d", (int)e);
        e = kpack_load_code_object(cache, "not msgpack", binary, 0, arches, 2, &co, &co_len);
        CHECK(e == KPACK_ERROR_INVALID_METADATA, "bad marker gave %d", (int)e);
        kpack_cache_destroy(cache);
        free(want);
    }
    return failures;
}

/* ---- ELF64 little-endian section lookup (enough for host-only binaries) ---- */

static uint64_t rd(const unsigned char* p, size_t n) {
    uint64_t v = 0;
    while (n--) v = (v << 8) | p[n];
    return v;
}

static const unsigned char* find_section(const unsigned char* elf, size_t len, const char* name,
                                         size_t* size_out) {
    uint64_t shoff, shstr_off;
    unsigned shentsize, shnum, shstrndx, i;
    if (len < 64 || memcmp(elf, "\177ELF", 4) != 0 || elf[4] != 2 || elf[5] != 1) return NULL;
    shoff = rd(elf + 0x28, 8);
    shentsize = (unsigned)rd(elf + 0x3a, 2);
    shnum = (unsigned)rd(elf + 0x3c, 2);
    shstrndx = (unsigned)rd(elf + 0x3e, 2);
    if (shentsize < 64 || shoff > len || (uint64_t)shnum * shentsize > len - shoff || shstrndx >= shnum)
        return NULL;
    shstr_off = rd(elf + shoff + (uint64_t)shstrndx * shentsize + 0x18, 8);
    for (i = 0; i < shnum; i++) {
        const unsigned char* sh = elf + shoff + (uint64_t)i * shentsize;
        uint64_t name_off = shstr_off + rd(sh, 4);
        uint64_t off = rd(sh + 0x18, 8), size = rd(sh + 0x20, 8);
        size_t nlen = strlen(name);
        if (name_off + nlen + 1 > len) continue;
        if (memcmp(elf + name_off, name, nlen + 1) != 0) continue;
        if (off > len || size > len - off) return NULL;
        *size_out = (size_t)size;
        return elf + off;
    }
    return NULL;
}

static int run_split(const char* binary, const char* expect_file) {
    size_t len = 0, marker_len = 0, seg_len = 0, i, loaded = 0;
    unsigned char* elf = read_file(binary, &len);
    const unsigned char* marker;
    const unsigned char* seg;
    uint32_t co_indices[256];
    size_t n_wrappers = 0;
    kpack_cache_t cache = NULL;
    FILE* list;
    char line[8192];

    if (!elf) {
        fprintf(stderr, "cannot read %s\n", binary);
        return 1;
    }
    marker = find_section(elf, len, ".rocm_kpack_ref", &marker_len);
    seg = find_section(elf, len, ".hipFatBinSegment", &seg_len);
    CHECK(marker != NULL && marker_len > 0, "%s has no .rocm_kpack_ref", binary);
    CHECK(seg != NULL && seg_len % 24 == 0, "%s has no usable .hipFatBinSegment", binary);
    if (!marker || !seg) {
        free(elf);
        return failures;
    }
    for (i = 0; i + 24 <= seg_len && n_wrappers < 256; i += 24) {
        CHECK(rd(seg + i, 4) == 0x4B504948u, "wrapper %zu magic %08llx is not HIPK", i / 24,
              (unsigned long long)rd(seg + i, 4));
        co_indices[n_wrappers++] = (uint32_t)rd(seg + i + 16, 4);
    }
    printf("wrappers:");
    for (i = 0; i < n_wrappers; i++) printf(" %u", (unsigned)co_indices[i]);
    printf("\n");

    CHECK(kpack_cache_create(&cache) == KPACK_SUCCESS, "cache_create");
    list = fopen(expect_file, "r");
    CHECK(list != NULL, "cannot open %s", expect_file);
    while (list && fgets(line, sizeof line, list)) {
        unsigned co_index = 0;
        char target[256], expected_path[4096];
        const char* arches[1];
        void* co = NULL;
        size_t co_len = 0, want_len = 0, w;
        unsigned char* want;
        bool wrapper_known = false;
        kpack_error_t e;
        if (sscanf(line, "%u %255s %4095[^\n]", &co_index, target, expected_path) != 3) continue;
        for (w = 0; w < n_wrappers; w++) wrapper_known |= co_indices[w] == co_index;
        CHECK(wrapper_known, "no wrapper has co_index %u", co_index);
        want = read_file(expected_path, &want_len);
        CHECK(want != NULL, "cannot read %s", expected_path);
        arches[0] = target;
        e = kpack_load_code_object(cache, marker, binary, co_index, arches, 1, &co, &co_len);
        CHECK(e == KPACK_SUCCESS, "load co_index %u %s = %d", co_index, target, (int)e);
        if (e == KPACK_SUCCESS && want) {
            CHECK(co_len == want_len && memcmp(co, want, want_len) == 0,
                  "co_index %u %s: %zu bytes differ from %s (%zu bytes)", co_index, target, co_len,
                  expected_path, want_len);
            if (co_len == want_len && memcmp(co, want, want_len) == 0) loaded++;
        }
        kpack_free_code_object(co);
        free(want);
    }
    if (list) fclose(list);
    kpack_cache_destroy(cache);
    free(elf);
    printf("loaded %zu identical code objects\n", loaded);
    return failures;
}

static int run_clr(const char* dir, const char* cases) {
    char line[1024];
    FILE* f = fopen(cases, "r");
    kpack_cache_t cache = NULL;
    if (!f) {
        fprintf(stderr, "cannot open %s\n", cases);
        return 1;
    }
    if (kpack_cache_create(&cache) != KPACK_SUCCESS) {
        fclose(f);
        return 1;
    }
    while (fgets(line, sizeof line, f)) {
        char name[128], marker_file[128], isa[128], generic[128];
        char marker_path[2048], binary[2048];
        unsigned co = 0;
        const char* arches[2];
        size_t count = 1, marker_len = 0, size = 0;
        unsigned char* marker;
        void* data = NULL;
        kpack_error_t e;
        if (line[0] == '#' || line[0] == '\n') continue;
        if (sscanf(line, "%127s %127s %u %127s %127s", name, marker_file, &co, isa, generic) != 5) {
            fprintf(stderr, "bad case line: %s", line);
            failures++;
            continue;
        }
        snprintf(marker_path, sizeof marker_path, "%s/%s", dir, marker_file);
        snprintf(binary, sizeof binary, "%s/lib/libfoo.so", dir);
        marker = read_file(marker_path, &marker_len);
        if (!marker) {
            fprintf(stderr, "cannot read %s\n", marker_path);
            failures++;
            continue;
        }
        arches[0] = isa;
        if (strcmp(generic, "-") != 0) {
            arches[1] = generic;
            count = 2;
        }
        e = kpack_load_code_object(cache, marker, binary, co, arches, count, &data, &size);
        if (e == KPACK_SUCCESS) {
            size_t i;
            bool text = size > 0;
            for (i = 0; i < size; i++) {
                unsigned char c = ((unsigned char*)data)[i];
                if (c < 0x21 || c > 0x7e) text = false;
            }
            printf("%s %d ", name, (int)e);
            if (text) {
                fwrite(data, 1, size, stdout);
                printf("\n");
            } else {
                printf("<%zu bytes>\n", size);
            }
            kpack_free_code_object(data);
        } else {
            printf("%s %d -\n", name, (int)e);
        }
        free(marker);
    }
    kpack_cache_destroy(cache);
    fclose(f);
    return failures;
}

int main(int argc, char** argv) {
    int rc;
    if (argc == 3 && strcmp(argv[1], "vectors") == 0) {
        rc = run_vectors(argv[2]);
    } else if (argc == 4 && strcmp(argv[1], "split") == 0) {
        rc = run_split(argv[2], argv[3]);
    } else if (argc == 4 && strcmp(argv[1], "clr") == 0) {
        return run_clr(argv[2], argv[3]) == 0 ? 0 : 1;
    } else {
        fprintf(stderr, "usage: %s vectors <dir> | split <binary> <expect-file> | clr <dir> <cases>\n", argv[0]);
        return 2;
    }
    if (rc == 0) printf("OK\n");
    return rc == 0 ? 0 : 1;
}
