"""Prints where, under an install prefix, this interpreter looks for packages: the path of its
first site-packages directory from the `lib*/python*` component on, e.g.
lib/python3.11/site-packages (upstream CPython, venvs, conda) or lib/python3.11/dist-packages
(Debian's python3, whose /usr/local prefix this is). python/CMakeLists.txt installs the package
there, so that `cmake --install build --prefix P` puts it on sys.path of an interpreter whose
prefix is P. With `--check DIR` it says instead whether DIR is on the interpreter's sys.path
(exit 0) or not (exit 1).
"""
import os
import site
import sys
import sysconfig


def site_dirs():
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    return dirs + [sysconfig.get_path("purelib")]


def relative_site_dir():
    for d in site_dirs():
        parts = os.path.normpath(d).split(os.sep)
        for i in range(len(parts) - 2, 0, -1):
            if parts[i].startswith("lib") and parts[i + 1].startswith("python"):
                return "/".join(parts[i:])
    return "lib/python%d.%d/site-packages" % sys.version_info[:2]


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        want = os.path.realpath(sys.argv[2])
        return 0 if any(os.path.realpath(p) == want for p in sys.path if p) else 1
    print(relative_site_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
