/* A qemu TCG plugin that counts the guest instructions a program executes and prints the
 * total to stderr at exit ("instructions N"). The few declarations it needs from qemu's
 * plugin interface (version 1, qemu 7.2 and later) are written out here, so it builds with
 * gcc alone: gcc -shared -fPIC -O2 qemu_count_insns.c -o libcount.so, then
 * qemu-aarch64 -plugin ./libcount.so PROGRAM. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
struct qemu_info;
enum { INLINE_ADD_U64 = 0 };

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

extern size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
extern void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, int op,
                                                     void *ptr, uint64_t imm);
extern void qemu_plugin_register_vcpu_tb_trans_cb(
    qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
extern void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id,
                                           void (*cb)(qemu_plugin_id_t, void *), void *udata);

static uint64_t executed;

/* Each translated block adds its instruction count to the total every time it runs. */
static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, INLINE_ADD_U64, &executed,
                                             qemu_plugin_tb_n_insns(tb));
}

static void on_exit(qemu_plugin_id_t id, void *udata) {
    (void)id;
    (void)udata;
    fprintf(stderr, "instructions %llu\n", (unsigned long long)executed);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
                                                               const struct qemu_info *info,
                                                               int argc, char **argv) {
    (void)info;
    (void)argc;
    (void)argv;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_exit, NULL);
    return 0;
}
