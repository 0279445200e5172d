// Package npusmi puts Huawei's npu-smi command line tool behind a Go
// interface: the Ascend plugin lists a node's NPUs, the vNPU templates a
// chip offers and the vNPUs it holds, and creates and destroys vNPUs, all by
// running npu-smi and parsing the text it prints.
//
// # Where the formats come from
//
// Every parser follows the printf formats of npu-smi itself, as published
// with Huawei's open-source CANN driver sources (printf_template_info,
// print_mapping_info, print_all_info, print_ascend_chip_info,
// print_ascend_board_info, print_memory_info, print_npu_common_info; the
// info-vnpu printers printf_vnpu_free_resoure_info and
// printf_each_vnpu_info; the set handlers set_chip_create_vdevice_* and
// set_chip_destroy_vdevice_*, check_create_vnpu_param, get_valid_vdev_id
// and the create-vnpu/destroy-vnpu usage texts), cross-checked against
// output pasted from real machines:
//
//   - info -m, info -l: verbatim captures of 8 x 910B3 and 910B4 hosts
//     (gpustack's npu_smi detector tests, telegraf's npu_smi input tests,
//     Ascend docs "昇腾芯片SoC型号获取方法").
//   - info -t board -i N [-c C], -t memory, -t common: gpustack, telegraf,
//     dlrover and Huawei's npu-smi command reference.
//   - info -t template-info and info -t info-vnpu, create-vnpu and
//     destroy-vnpu: a blog capture on an 8 x 910B4 Atlas 800I A2 (ids
//     100/101 on NPU 0, 116/117 on NPU 1, ...), HAMi's 910B3/910B4-1 notes
//     (vir10_3c_32g, vir05_1c_16g; "60/64" free/total HBM), a 310P3 capture
//     and the MindCluster "虚拟化实例特性指南".
//
// # Decisions
//
//   - npu-smi prints its own errors on stdout and several refusals exit 0
//     (a VM, the wrong vnpu-mode): success of set commands is decided by the
//     "Status : OK" / "Message : ..." lines, never by the exit status alone.
//   - create-vnpu reports no vNPU id ("Create vnpu success" in every
//     version found). With no id requested the Client lists the chip's
//     vNPUs before and after and takes the new one; callers must serialise
//     creations on one chip.
//   - template-info is a card-level query in npu-smi's sources (its
//     handler sits in the card table and defaults to the first card), so
//     Templates runs "-t template-info -i <card>". (HAMi's notes say some
//     drivers want "-i -c"; no source shows a chip-level handler.)
//   - npu-smi on 910A/910B servers prints no physical chip id (only the A3's
//     info -m has a "Chip Phy-ID" column); Chip.PhyID falls back to the
//     logic id there. On the one-chip-per-card Atlas 800 and 800T A2 the
//     tool numbers vNPUs phy_id*16+100.. per NPU, which matches logic ids in
//     every capture found.
//   - Bus ids are printed upper-case ("0000:C1:00.0"); Chip.BusID holds the
//     kernel's lower-case form.
//
// # Device nodes
//
// A vNPU is the character device /dev/vdavinci<vnpu id> on the host (the
// driver's uda module names physical devices "davinci" and virtual ones
// "vdavinci", UDA_MIA_UDEV_OFFSET 100; Ascend Docker Runtime's
// VDEVICE_NAME); containers get it as /dev/davinci<id> next to
// /dev/davinci_manager, /dev/devmm_svm and /dev/hisi_hdc. All their
// majors are allocated dynamically (alloc_chrdev_region) and differ
// between hosts in published listings; in the current open-source driver
// the /proc/devices regions are "devdrv-cdev" (davinciN and vdavinciN
// alike, minor = the driver's device id), "hisi_davinci_intf"
// (davinci_manager), "devmm_svm" and "hisi_hdc".
package npusmi
