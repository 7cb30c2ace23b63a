/* SPDX-License-Identifier: MIT
 *
 * KPACK_API marks the functions of librocm_kpack. The same spelling as the
 * reference library's generated export header, so sources that include
 * <rocm_kpack/kpack_export.h> directly keep compiling. */
#ifndef ROCM_KPACK_EXPORT_H
#define ROCM_KPACK_EXPORT_H

#ifndef KPACK_API
#if defined(_WIN32) && defined(KPACK_BUILDING_DLL)
#define KPACK_API __declspec(dllexport)
#elif defined(_WIN32) && !defined(KPACK_STATIC)
#define KPACK_API __declspec(dllimport)
#elif defined(__GNUC__) || defined(__clang__)
#define KPACK_API __attribute__((visibility("default")))
#else
#define KPACK_API
#endif
#endif

#endif /* ROCM_KPACK_EXPORT_H */
