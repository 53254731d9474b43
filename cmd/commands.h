/* commands.h: gpt's commands, each given the arguments after its name;
 * each returns the exit code (or exits: pod/error.h's die). */
#ifndef COMMANDS_H
#define COMMANDS_H

int cmd_train(int argc, char **argv);  /* train.c */
int cmd_sample(int argc, char **argv); /* commands.c */
int cmd_eval(int argc, char **argv);
int cmd_shard(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_sweep(int argc, char **argv); /* sweep.c */

#endif
