/* The element-type codes every part of the core speaks: kernel tables are indexed by them
 * (runtime/mc_kernels.h), drivers and call descriptors carry them, and the SIMD helpers (simd/)
 * load and store by them.  The conversions between the types are the cast family's
 * (convert/).  It includes nothing and lives in src/ itself, outside every folder, so a level
 * file or a SIMD header that needs a type code reaches into no other folder for it.
 */
#ifndef MC_TYPES_H_
#define MC_TYPES_H_

/* MC_NDTYPES counts the types every family computes in (the first four codes): the tables of
 * the scans and the float-typed kernels are indexed below it.  The two float8 formats come after
 * it and only the cast family takes them (its table is indexed below MC_NCASTTYPES), so they
 * neither grow nor break the other families' tables and checks. */
enum {
    MC_F16 = 0,
    MC_BF16 = 1,
    MC_F32 = 2,
    MC_F64 = 3,
    MC_NDTYPES = 4,
    MC_E4M3 = 4,        /* ml_dtypes.float8_e4m3fn */
    MC_E5M2 = 5,        /* ml_dtypes.float8_e5m2 */
    MC_NCASTTYPES = 6
};

#endif
