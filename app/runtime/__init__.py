"""How a process of this project runs, for the commands and the library alike: TensorFlow
imported without its start-up noise (`quiet_tensorflow`), its CPU thread pools
(`threads`) and the threads decoding gets unless told (`decoding_threads`), a GPU on the
machine that TensorFlow cannot see (`gpu_warning`), and progress on the terminal
(`progress`). No flags here: the commands read those (app/cli/)."""
