/* The front's exported verbs: one stub each, a tail jump through its
 * slot, so that the definition it reaches (the core's, or libibverbs's
 * with IBPATH_DISABLE=1) sees the program's return address and the
 * program's arguments, as if the program had called it. A slot is filled
 * once (front.c); a stub reached before that (a library's constructor
 * that runs before the front's) goes through lipf_slow, which keeps the
 * argument registers, asks lipf_resolve for the definition and jumps
 * there. Built for x86-64 and AArch64 only: elsewhere build.sh ships the
 * core alone as libibpath.so. */
#include "verbs.h"

#define SLOT(name, version, failure) __attribute__((visibility("hidden"))) void *lipf_slot_##name;
LIPF_VERBS(SLOT)

#if defined(__x86_64__)

#define STUB(name, version, failure) \
	__asm__(".text\n" \
	        ".globl " #name "\n" \
	        ".type " #name ", @function\n" \
	        ".p2align 4\n" #name ":\n" \
	        "	.cfi_startproc\n" \
	        "	endbr64\n" \
	        "	movq lipf_slot_" #name "(%rip), %r11\n" \
	        "	testq %r11, %r11\n" \
	        "	jz 1f\n" \
	        "	jmp *%r11\n" \
	        "1:	leaq lipf_slot_" #name "(%rip), %r11\n" \
	        "	jmp lipf_slow\n" \
	        "	.cfi_endproc\n" \
	        ".size " #name ", .-" #name "\n");

/* lipf_slow: %r11 holds the slot. Seven pushes keep the stack 16-byte
 * aligned for the call (it was 8 off at the stub's entry). */
__asm__(".text\n"
        ".hidden lipf_slow\n"
        ".type lipf_slow, @function\n"
        ".p2align 4\n"
        "lipf_slow:\n"
        "	.cfi_startproc\n"
        "	pushq %rax\n"
        "	.cfi_adjust_cfa_offset 8\n"
        "	pushq %rdi\n"
        "	.cfi_adjust_cfa_offset 8\n"
        "	pushq %rsi\n"
        "	.cfi_adjust_cfa_offset 8\n"
        "	pushq %rdx\n"
        "	.cfi_adjust_cfa_offset 8\n"
        "	pushq %rcx\n"
        "	.cfi_adjust_cfa_offset 8\n"
        "	pushq %r8\n"
        "	.cfi_adjust_cfa_offset 8\n"
        "	pushq %r9\n"
        "	.cfi_adjust_cfa_offset 8\n"
        "	movq %r11, %rdi\n"
        "	call lipf_resolve\n"
        "	movq %rax, %r11\n"
        "	popq %r9\n"
        "	.cfi_adjust_cfa_offset -8\n"
        "	popq %r8\n"
        "	.cfi_adjust_cfa_offset -8\n"
        "	popq %rcx\n"
        "	.cfi_adjust_cfa_offset -8\n"
        "	popq %rdx\n"
        "	.cfi_adjust_cfa_offset -8\n"
        "	popq %rsi\n"
        "	.cfi_adjust_cfa_offset -8\n"
        "	popq %rdi\n"
        "	.cfi_adjust_cfa_offset -8\n"
        "	popq %rax\n"
        "	.cfi_adjust_cfa_offset -8\n"
        "	jmp *%r11\n"
        "	.cfi_endproc\n"
        ".size lipf_slow, .-lipf_slow\n");

#elif defined(__aarch64__)

#define STUB(name, version, failure) \
	__asm__(".text\n" \
	        ".globl " #name "\n" \
	        ".type " #name ", %function\n" \
	        ".p2align 4\n" #name ":\n" \
	        "	.cfi_startproc\n" \
	        "	hint #34\n" /* bti c */ \
	        "	adrp x16, lipf_slot_" #name "\n" \
	        "	add x16, x16, #:lo12:lipf_slot_" #name "\n" \
	        "	ldar x16, [x16]\n" /* pairs with front.c's release store */ \
	        "	cbz x16, 1f\n" \
	        "	br x16\n" \
	        "1:	adrp x17, lipf_slot_" #name "\n" \
	        "	add x17, x17, #:lo12:lipf_slot_" #name "\n" \
	        "	b lipf_slow\n" \
	        "	.cfi_endproc\n" \
	        ".size " #name ", .-" #name "\n");

/* lipf_slow: x17 holds the slot; x0-x7 (arguments) and x8 (indirect
 * result) are kept, x30 comes back as the program's return address */
__asm__(".text\n"
        ".hidden lipf_slow\n"
        ".type lipf_slow, %function\n"
        ".p2align 4\n"
        "lipf_slow:\n"
        "	.cfi_startproc\n"
        "	stp x29, x30, [sp, #-96]!\n"
        "	.cfi_def_cfa_offset 96\n"
        "	.cfi_offset 29, -96\n"
        "	.cfi_offset 30, -88\n"
        "	mov x29, sp\n"
        "	stp x0, x1, [sp, #16]\n"
        "	stp x2, x3, [sp, #32]\n"
        "	stp x4, x5, [sp, #48]\n"
        "	stp x6, x7, [sp, #64]\n"
        "	str x8, [sp, #80]\n"
        "	mov x0, x17\n"
        "	bl lipf_resolve\n"
        "	mov x16, x0\n"
        "	ldp x0, x1, [sp, #16]\n"
        "	ldp x2, x3, [sp, #32]\n"
        "	ldp x4, x5, [sp, #48]\n"
        "	ldp x6, x7, [sp, #64]\n"
        "	ldr x8, [sp, #80]\n"
        "	ldp x29, x30, [sp], #96\n"
        "	.cfi_restore 29\n"
        "	.cfi_restore 30\n"
        "	.cfi_def_cfa_offset 0\n"
        "	br x16\n"
        "	.cfi_endproc\n"
        ".size lipf_slow, .-lipf_slow\n");

#else
#error "the front's stubs exist for x86-64 and AArch64 only (build.sh ships the core alone elsewhere)"
#endif

LIPF_VERBS(STUB)
