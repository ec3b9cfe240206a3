/* The element-type codes every part of the core speaks: kernel tables are indexed by them
 * (runtime/mc_kernels.h), drivers and call descriptors carry them, and the SIMD helpers (simd/)
 * load and store by them.  The conversions between the types are the cast family's
 * (convert/).  It includes nothing and lives in src/ itself, outside every folder, so a level
 * file or a SIMD header that needs a type code reaches into no other folder for it.
 */
#ifndef MC_TYPES_H_
#define MC_TYPES_H_

enum { MC_F16 = 0, MC_BF16 = 1, MC_F32 = 2, MC_F64 = 3, MC_NDTYPES = 4 };

#endif
