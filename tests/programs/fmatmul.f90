! Blocked matrix product C = A B on the device, in Fortran: each block of A, B and C mapped
! once (target enter data), one target region per block product, in a task ordered by
! depend on its blocks (flang-19 has no nowait on target constructs and no array elements in
! depend: the tasks carry the dependences and run the regions concurrently, and a block is
! a whole explicit-shape dummy array to the routines), results brought back with target
! update. Prints the largest error against the product computed on the host.
module blocks
  implicit none
  integer, parameter :: bs = 64
contains
  subroutine enter(a, b, c)
    real(8) :: a(bs, bs), b(bs, bs), c(bs, bs)
    !$omp target enter data map(to: a, b, c)
  end subroutine

  subroutine product_kernel(a, b, c)
    real(8) :: a(bs, bs), b(bs, bs), c(bs, bs)
    integer :: i, j, k
    !$omp target map(to: a, b) map(tofrom: c)
    !$omp parallel do private(i, k)
    do j = 1, bs
      do k = 1, bs
        do i = 1, bs
          c(i, j) = c(i, j) + a(i, k) * b(k, j)
        end do
      end do
    end do
    !$omp end target
  end subroutine

  subroutine product(a, b, c)
    real(8) :: a(bs, bs), b(bs, bs), c(bs, bs)
    !$omp task depend(in: a, b) depend(inout: c) shared(a, b, c)
    call product_kernel(a, b, c)
    !$omp end task
  end subroutine

  subroutine leave(a, b, c)
    real(8) :: a(bs, bs), b(bs, bs), c(bs, bs)
    !$omp target update from(c)
    !$omp target exit data map(release: a, b, c)
  end subroutine
end module

program fmatmul
  use omp_lib
  use blocks
  implicit none
  integer :: nb, n, r, c, i, j, k, blk
  real(8), allocatable :: am(:,:,:), bm(:,:,:), cm(:,:,:)
  real(8) :: err, want
  character(len=32) :: arg
  nb = 4
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) nb
  end if
  if (omp_get_num_devices() < 1) then
    print '(a)', 'fmatmul: no device'
    stop 3
  end if
  n = nb * bs
  allocate (am(bs, bs, nb*nb), bm(bs, bs, nb*nb), cm(bs, bs, nb*nb))
  do r = 0, n - 1
    do c = 0, n - 1
      blk = (r / bs) * nb + c / bs + 1
      am(mod(r, bs) + 1, mod(c, bs) + 1, blk) = dble(mod(r*7 + c*3, 11)) - 5d0
      bm(mod(r, bs) + 1, mod(c, bs) + 1, blk) = dble(mod(r*5 + c*2, 13)) - 6d0
    end do
  end do
  cm = 0d0
  do blk = 1, nb*nb
    call enter(am(:, :, blk), bm(:, :, blk), cm(:, :, blk))
  end do
  !$omp parallel
  !$omp single
  do i = 0, nb - 1
    do j = 0, nb - 1
      do k = 0, nb - 1
        call product(am(:, :, i*nb + k + 1), bm(:, :, k*nb + j + 1), cm(:, :, i*nb + j + 1))
      end do
    end do
  end do
  !$omp end single
  !$omp end parallel
  cm = -1d0
  do blk = 1, nb*nb
    call leave(am(:, :, blk), bm(:, :, blk), cm(:, :, blk))
  end do
  err = 0d0
  do r = 0, n - 1
    do c = 0, n - 1
      want = 0d0
      do k = 0, n - 1
        want = want + (dble(mod(r*7 + k*3, 11)) - 5d0) * (dble(mod(k*5 + c*2, 13)) - 6d0)
      end do
      err = max(err, abs(cm(mod(r, bs) + 1, mod(c, bs) + 1, (r / bs) * nb + c / bs + 1) - want))
    end do
  end do
  if (err < 1d-6) then
    print '(a, i0, a, i0, a, i0, a)', 'fmatmul N=', n, ' BS=', bs, ' regions=', nb*nb*nb, ': PASS'
  else
    print '(a, es10.3)', 'fmatmul: FAIL, max error ', err
    stop 1
  end if
end program
