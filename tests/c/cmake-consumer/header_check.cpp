// The header compiles as C++ and links: every function through a typed
// pointer, so a signature mismatch is a compile error.
#include <rocm_kpack/kpack.h>

#include <cstdio>

int main() {
    kpack_error_t (*open_fn)(const char*, kpack_archive_t*) = kpack_open;
    void (*close_fn)(kpack_archive_t) = kpack_close;
    kpack_error_t (*load_fn)(kpack_cache_t, const void*, const char*, uint32_t, const char* const*, size_t,
                             void**, size_t*) = kpack_load_code_object;
    kpack_error_t (*enum_fn)(const char*, kpack_arch_callback_t, void*) = kpack_enumerate_architectures;
    kpack_cache_t cache = nullptr;
    if (kpack_cache_create(&cache) != KPACK_SUCCESS) return 1;
    kpack_cache_destroy(cache);
    kpack_archive_t archive = nullptr;
    kpack_error_t e = open_fn("/nonexistent.kpack", &archive);
    close_fn(archive);
    std::printf("%d %d %s %d\n", static_cast<int>(e), static_cast<int>(KPACK_ERROR_ARCH_NOT_FOUND), KPACK_MAGIC,
                KPACK_CURRENT_VERSION);
    (void)load_fn;
    (void)enum_fn;
    return e == KPACK_ERROR_FILE_NOT_FOUND ? 0 : 1;
}
