//! Does the x86_64 HTP library accept registered shared buffers (`QnnMem_register`)? Each memory
//! type that could hold a graph input is tried with a real fd (a memfd, mapped), and the answer is
//! asserted, so this fails if a QNN release starts accepting one (then run the graph through it
//! and compare with the plain `clientBuf` path). Findings: docs/qnn-notes.md, "Registered shared
//! buffers".

#![cfg(target_os = "linux")]

mod common;

use common::{context, max_err, values};
use qnn::{DType, Input, Node, Output, SharedMemory};

/// A memfd of `len` bytes, mapped shared: what an app would hand over if it had no rpcmem.
struct MemFd {
    fd: i32,
    ptr: *mut libc::c_void,
    len: usize,
}

impl MemFd {
    fn new(len: usize) -> MemFd {
        // SAFETY: plain syscalls on a fresh fd; results checked.
        unsafe {
            let fd = libc::memfd_create(c"qnnx-mem-probe".as_ptr(), 0);
            assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
            assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
            let ptr = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            assert_ne!(ptr, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
            MemFd { fd, ptr, len }
        }
    }
}

impl Drop for MemFd {
    fn drop(&mut self) {
        // SAFETY: our own mapping and fd.
        unsafe {
            libc::munmap(self.ptr, self.len);
            libc::close(self.fd);
        }
    }
}

#[test]
fn emulator_refuses_every_shared_memory_type() {
    let Some((_b, _d, ctx)) = context() else {
        return;
    };
    let n = 64usize;
    let mut g = ctx.build_graph("mem_probe").unwrap();
    let x = g.input("x", DType::F32, &[1, n as u32]).unwrap();
    let y = g.output("y", DType::F32, &[1, n as u32]).unwrap();
    g.add_node(&Node::new("relu", "Relu").inputs(&[x]).outputs(&[y]))
        .unwrap();
    let graph = g.finalize().unwrap();
    // The plain path works on this context, so a refusal below is about the memory, not the graph.
    let xs = values(7, n, 1.0);
    let mut ys = vec![0f32; n];
    graph
        .execute(&[Input::new(&xs)], &mut [Output::new(&mut ys)])
        .unwrap();
    // HTP computes in fp16 here, hence the tolerance.
    let want: Vec<f32> = xs.iter().map(|x| x.max(0.0)).collect();
    assert!(max_err(&ys, &want) < 1e-2);

    let input = &graph.inputs()[0];
    let buf = MemFd::new(input.num_bytes());
    let cases = [
        ("ION", SharedMemory::Ion { fd: buf.fd }),
        ("ION with fd -1", SharedMemory::Ion { fd: -1 }),
        (
            "DMA-BUF",
            SharedMemory::DmaBuf {
                fd: buf.fd,
                data: buf.ptr,
            },
        ),
        (
            "CUSTOM (HTP shared buffer)",
            SharedMemory::HtpSharedBuffer {
                fd: buf.fd,
                offset: 0,
                total_size: buf.len as u64,
            },
        ),
    ];
    for (what, memory) in cases {
        // SAFETY: `buf` outlives the registration (dropped at the end of this iteration).
        let r = unsafe { ctx.register_memory(memory, input) };
        let e = match r {
            Ok(_) => panic!(
                "QnnMem_register now accepts {what} on this library: execute the graph with the \
                 tensor's memHandle, compare with the clientBuf path above, and update \
                 docs/qnn-notes.md"
            ),
            Err(qnn::Error::Api(e)) => e,
            Err(e) => panic!("{what}: expected a QNN refusal, got {e}"),
        };
        eprintln!("{what}: {e}");
        // 2.51's HTP library refuses the whole QnnMem API before looking at the descriptor (the
        // fd -1 case gets the same answer as a real mapped fd).
        assert_eq!((e.call, e.code), ("memRegister", 1000), "{what}: {e}");
        assert_eq!(e.name, Some("QNN_COMMON_ERROR_NOT_SUPPORTED"));
        assert!(
            e.log
                .iter()
                .any(|l| l.contains("QnnMem API is not supported")),
            "{what}: {:?}",
            e.log
        );
    }
}
