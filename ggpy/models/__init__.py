"""Models on ggpy, each a package with its own command line: mobilesam (`ggpy-sam`, the `sam` extra) and llama
(`ggpy-llama`, the `llama` extra). `import ggpy` imports none of them."""
