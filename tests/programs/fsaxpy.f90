! saxpy (y = a x + y) on the device in Fortran: blocks of the vectors, one target region each
! (target parallel do), run concurrently from tasks (flang-19 has no nowait on target), so
! they spread over the workers. Checks every element against the host's result. (A task
! around the call in the main program, `task firstprivate(b)` + `call k(x(:, b), ...)`,
! leaves y unchanged under flang-19, under LLVM 19's own runtime too: the task is in the
! routine, as in fmatmul.f90.)
module saxpy_blocks
  implicit none
  integer, parameter :: bs = 50000
contains
  subroutine saxpy_kernel(a, x, y)
    real :: a, x(bs), y(bs)
    integer :: i
    !$omp target parallel do map(to: x) map(tofrom: y)
    do i = 1, bs
      y(i) = a * x(i) + y(i)
    end do
  end subroutine

  ! A task per block: its region runs while the next blocks are handed out.
  subroutine saxpy_block(a, x, y)
    real :: a, x(bs), y(bs)
    !$omp task shared(x, y) firstprivate(a) depend(inout: y)
    call saxpy_kernel(a, x, y)
    !$omp end task
  end subroutine
end module

program fsaxpy
  use omp_lib
  use saxpy_blocks
  implicit none
  integer :: nb, b, i, bad
  real, allocatable :: x(:,:), y(:,:)
  real :: a
  character(len=32) :: arg
  nb = 8
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) nb
  end if
  if (omp_get_num_devices() < 1) then
    print '(a)', 'fsaxpy: no device'
    stop 3
  end if
  allocate (x(bs, nb), y(bs, nb))
  a = 2.0
  do b = 1, nb
    do i = 1, bs
      x(i, b) = real(mod(i + b, 7))
      y(i, b) = real(mod(i * b, 5))
    end do
  end do
  !$omp parallel
  !$omp single
  do b = 1, nb
    call saxpy_block(a, x(:, b), y(:, b))
  end do
  !$omp end single
  !$omp end parallel
  bad = 0
  do b = 1, nb
    do i = 1, bs
      if (y(i, b) /= a * real(mod(i + b, 7)) + real(mod(i * b, 5))) bad = bad + 1
    end do
  end do
  if (bad == 0) then
    print '(a, i0, a, i0, a)', 'fsaxpy n=', nb * bs, ' blocks=', nb, ': PASS'
  else
    print '(a, i0, a)', 'fsaxpy: FAIL, ', bad, ' wrong elements'
    stop 1
  end if
end program
