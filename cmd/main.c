/* main.c: gpt's entry point: joins the pod (pod.h) and runs the command
 * its first argument names (commands.h). The tests and the benchmark link
 * every other source and leave this one out: they bring main() of their
 * own. */
#include "cmd/commands.h"
#include "gpt.h"
#include "pod/comm.h"
#include "cmd/pod.h"
#include "tensor.h"
#include "pod/error.h"
#include <stdio.h>
#include <string.h>

/* The commands, in the order `gpt --help` lists them. */
static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *what;
} commands[] = {
    {"train", cmd_train, "train the byte-level GPT (no flags = the reference's run)"},
    {"sample", cmd_sample, "stream a continuation from a checkpoint"},
    {"eval", cmd_eval, "test-split loss of a checkpoint"},
    {"shard", cmd_shard, "write text files as WebDataset tar shards"},
    {"plot", cmd_plot, "draw runs' losses on one chart (their --out directories)"},
    {"sweep", cmd_sweep, "a grid of training runs at once (flags with comma lists)"},
};
#define N_COMMANDS (sizeof commands / sizeof *commands)

static void usage_main(FILE *f)
{
    fputs("usage: gpt <command> [flags]\n", f);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].what);
    fputs("gpt --version prints the version.\n"
          "gpt <command> --help lists each command's flags.\n"
          "GPT_ISA=scalar|avx2|avx512 lowers the kernel path; GPT_ISA=ref runs the\n"
          "plain-C twins, unfused, for reading (the same bits).\n", f);
}

static int run_command(int argc, char **argv)
{
    if (argc < 2) {
        if (is_master())
            usage_main(stderr);
        return 2;
    }
    isa_best(); /* validates GPT_ISA before any work */
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 2, argv + 2);
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("gpt %s (%s build, %s, %s)\n", GPT_VERSION, comm_name(), GPT_COMPILER, GPT_RUNTIME);
        return 0;
    }
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage_main(stdout);
        return 0;
    }
    die(2, "unknown command '%s' (gpt --help lists them)", argv[1]);
}

int main(int argc, char **argv)
{
    join_pod(&argc, &argv);
    exit_planned(run_command(argc, argv));
}
