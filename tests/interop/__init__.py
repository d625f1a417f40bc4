"""C Majordomo peers (MDP/0.1 and MDP/0.2, on plain libzmq) for the interop tests, and how to build them."""
