"""The step-parts benchmark runs end to end at toy sizes and prints both sides of each pair."""


def test_bench_step_parts_prints_each_pair(capsys):
    # In this process, which has TensorFlow already: a process of its own would import it again.
    from benchmarks import bench_step_parts

    bench_step_parts.main(["--tokens", "64", "--vocab", "50", "--d-model", "16", "--iterations", "1", "--repeats", "1"])
    output = capsys.readouterr().out
    lines = output.splitlines()
    assert lines[0] == "64 tokens, vocabulary 50, d_model 16, d_ff 256; median of 1 x 1 calls"
    names = [line.split("  ")[1].strip() for line in lines[1:]]
    assert names == ["loss, gradient written out (this project)", "loss, autodiff",
                     "output, whole logits (plain)", "output, fused, 512 rows at a time (this project)",
                     "Q/K/V, three matmuls (this project)", "Q/K/V, one fused matmul",
                     "dropout float32, Keras, 32-bit draws", "dropout float32, 16-bit draws (this project)",
                     "dropout bfloat16, Keras, 32-bit draws", "dropout bfloat16, 16-bit draws (this project)",
                     "feed-forward, Keras's Dense", "feed-forward, gradients turned (this project)"]
    # Each pair's first line is the reference its ratio is taken against.
    assert all(lines[index].endswith(" 1.00x") for index in (1, 3, 5, 7, 9, 11))
