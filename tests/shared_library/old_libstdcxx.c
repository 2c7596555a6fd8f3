/* A stand-in for an older libstdc++.so.6, as a conda or PyTorch environment brings one: the
 * soname libstdc++.so.6 and the version nodes of GCC 11's library (GLIBCXX_3.4 to
 * GLIBCXX_3.4.29, CXXABI_1.3 to CXXABI_1.3.13, old_libstdcxx.map), no GLIBCXX_3.4.30 (GCC 12).
 * A library that needs libstdc++ from GCC 12 fails to load in a process that has this one:
 * "version `GLIBCXX_3.4.30' not found". It has no C++ runtime at all, so it also shows that
 * libcachalot.so uses none of the host's. */
int old_libstdcxx_version(void) {
  return 29; /* GLIBCXX_3.4.29 */
}
