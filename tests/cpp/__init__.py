"""C++ test programs on the header-only library in cpp/include, and how to build them."""
