/* QMOE_API marks the functions of the public ABI. The library is built with hidden visibility,
 * so only what an installed header declares with QMOE_API is exported from libqmoe.so. */
#ifndef QMOE_EXPORT_H
#define QMOE_EXPORT_H

#if defined(_WIN32)
#define QMOE_API
#elif defined(__GNUC__) || defined(__clang__)
#define QMOE_API __attribute__((visibility("default")))
#else
#define QMOE_API
#endif

#endif /* QMOE_EXPORT_H */
