// The few libc functions the testbed calls. Plain DllImport with blittable signatures, not
// LibraryImport: a LibraryImport would put a generated wrapper frame between the caller and the
// P/Invoke, and the parked P/Invoke thread's expected call chain names the P/Invoke itself.

using System.Runtime.InteropServices;

namespace Cdac.Testbed
{
    internal static unsafe class Libc
    {
        public const int SchedIdle = 5;

        [DllImport("libc", EntryPoint = "gettid")]
        public static extern int gettid();

        [DllImport("libc", EntryPoint = "getppid")]
        public static extern int getppid();

        [DllImport("libc", EntryPoint = "_exit")]
        public static extern void _exit(int status);

        [DllImport("libc", EntryPoint = "pipe")]
        public static extern int pipe(int* fds);

        [DllImport("libc", EntryPoint = "read")]
        public static extern nint read(int fd, byte* buffer, nint count);

        [DllImport("libc", EntryPoint = "setpriority")]
        public static extern int setpriority(int which, int who, int prio);

        [DllImport("libc", EntryPoint = "sched_setscheduler")]
        public static extern int sched_setscheduler(int pid, int policy, int* param);
    }
}
