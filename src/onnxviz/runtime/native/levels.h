/* levels.h: the instruction-set levels every compiled module of onnxviz.runtime.native
 * shares (their numbers are in _cpu.c's header), and the one test of which this CPU and
 * its OS can run.  GCC's and Clang's __builtin_cpu_supports read CPUID and check, with
 * XGETBV, that the OS saves the wider registers. */
#ifndef ONNXVIZ_NATIVE_LEVELS_H
#define ONNXVIZ_NATIVE_LEVELS_H

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ONNXVIZ_X86 1
#else
#define ONNXVIZ_X86 0
#endif

/* The highest level this CPU runs: 0 generic, 1 AVX2+FMA, 2 AVX-512 F/BW/DQ/VL,
 * 3 AVX-512 VNNI. */
static int onnxviz_cpu_level(void) {
#if ONNXVIZ_X86
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return 0;
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")))
        return 1;
    if (!__builtin_cpu_supports("avx512vnni")) return 2;
    return 3;
#else
    return 0;
#endif
}

#endif
