__declspec(dllimport) void *PyModule_Create2(void *def, int api);
__declspec(dllexport) void *PyInit__native(void) { return PyModule_Create2(0, 1013); }
